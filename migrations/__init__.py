"""Alembic revisions of the asktell schema; ``asktell db upgrade`` applies them."""
