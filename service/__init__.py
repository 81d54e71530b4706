"""The asktell server: HTTP API, SQL persistence and orchestration of engines."""
