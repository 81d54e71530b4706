"""Server settings, read once from ``ASKTELL_*`` environment variables."""

from __future__ import annotations

from functools import lru_cache

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ASKTELL_")

    #: SQLAlchemy URL. The default is an embedded SQLite file in the working directory.
    #: ``postgresql://...`` URLs are rewritten to the psycopg 3 driver.
    database_url: str = "sqlite:///./asktell.db"
    #: Seconds between passes of the lease reaper.
    reaper_interval: float = 5.0
    #: Largest request body accepted, in bytes.
    max_body_bytes: int = 1024 * 1024
    #: Connection pool size per process (PostgreSQL).
    pool_size: int = 10
    #: Memory for the per-process cache of studies' completed-trial arrays, in bytes; least
    #: recently asked studies are evicted first. 0 turns it off (every ask reads all trials).
    history_cache_bytes: int = 512 * 1024 * 1024

    @field_validator("database_url")
    @classmethod
    def _driver(cls, url: str) -> str:
        for prefix in ("postgresql://", "postgres://", "postgresql+psycopg2://"):
            if url.startswith(prefix):
                return "postgresql+psycopg://" + url[len(prefix) :]
        return url

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


@lru_cache
def get_settings() -> Settings:
    return Settings()
