"""The server's request bounds, its thread settings and the SQLite store's open
settings are frozen configs on the shared base: every bad value is reported at once,
by name, in one ConfigError (an InvalidInputError)."""

from __future__ import annotations

import pytest

from osumem.errors import ConfigError, InvalidInputError
from osumem.frozen import FrozenConfig
from osumem.memory.backends.sqlite import SQLiteSettings, SQLiteStore
from osumem.serve.service import MemoryService, ServiceLimits, ServiceThreads


def test_service_limits_are_a_frozen_config():
    limits = ServiceLimits(max_budget=100)
    assert isinstance(limits, FrozenConfig)
    assert limits.replace(max_methods=0).to_dict() == {
        "max_budget": 100,
        "max_messages": 1000,
        "max_query_chars": 10000,
        "max_body_bytes": 4 * 1024 * 1024,
        "max_methods": 0,
    }
    with pytest.raises(ConfigError) as info:
        ServiceLimits(max_budget=0, max_messages=True, max_query_chars=2.5, max_methods=-1)
    text = str(info.value)
    for name in ("max_budget", "max_messages", "max_query_chars", "max_methods"):
        assert name in text, name
    assert isinstance(info.value, InvalidInputError)
    with pytest.raises(ConfigError, match="unknown parameter"):
        limits.replace(max_bytes=3)


def test_service_threads_are_checked_before_anything_opens(tmp_path):
    assert ServiceThreads(readers=2, torch_threads=None).readers == 2
    with pytest.raises(ConfigError, match="readers must be >= 1, got 0; torch_threads"):
        MemoryService(tmp_path / "r.db", encoder="hashing", readers=0, torch_threads=0)
    assert not (tmp_path / "r.db").exists()


def test_sqlite_settings(tmp_path):
    with pytest.raises(ConfigError, match="synchronous must be one of"):
        SQLiteStore(tmp_path / "a.db", synchronous="sometimes")
    with pytest.raises(ConfigError, match="timeout"):
        SQLiteSettings(timeout=-1)
    assert not (tmp_path / "a.db").exists()
    store = SQLiteStore(tmp_path / "a.db", synchronous="normal", timeout=0)
    assert store.timeout == 0 and store.n_steps("x") == 0
    store.close()
