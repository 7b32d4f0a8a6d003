"""The state store on a PostgreSQL server: the same event-sourced layout as
:class:`~renyiboost.stream.store.SQLiteStore`, so that a trainer restarted on another host
resumes every key's ledger from the database.

Install with ``pip install 'renyiboost[postgres]'`` (psycopg 3). Everything the SQLite
store promises holds here, with the server's means:

* **Never implicit.** A store lives in one PostgreSQL *schema* (namespace; default
  ``renyiboost``) of a database. ``create=True`` makes the tables there and refuses a schema
  that already holds a store's tables; without it, a schema with no store identity is
  :class:`~renyiboost.exceptions.StoreNotFound` (a dropped or restored-empty database must not
  hand every key a fresh budget).
* **One holder.** The store takes a session-level advisory lock keyed by its schema
  (``pg_try_advisory_lock``); a second trainer on the same store is refused with the
  holder's ``application_name`` (pid and host). The server drops the lock when the holder's
  connection ends, a ``kill -9`` included.
* **Durable before visible.** Each commit is one transaction with ``synchronous_commit =
  on``, so ``COMMIT`` returns after the server flushed its write-ahead log. A server run with
  ``fsync = off`` cannot keep that promise across a power loss: opening a store there is
  refused (:class:`~renyiboost.exceptions.StateStoreError`).
* A lost connection in the middle of a commit is a failed commit: the server rolls the
  transaction back whole, the engine stops (see :class:`~renyiboost.stream.engine.StreamEngine`)
  and a restart resumes from the last committed round.

Blobs are ``bytea`` with the same little-endian layouts and CRC-32s as in SQLite; identity
columns (never reused, like SQLite's ``AUTOINCREMENT``) number the events.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import socket
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from renyiboost.exceptions import LedgerConflict, StateStoreError, StoreLocked, StoreNotFound
from renyiboost.stream.store import NEVER_IMPLICIT, SNAPSHOT_RATIO, SQLStateStore, StoreIdentity

_SCHEMA = """
CREATE TABLE meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE keys(batch BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, uids BYTEA NOT NULL,
                  names TEXT NOT NULL, crc BIGINT NOT NULL, origins TEXT);
CREATE TABLE retirements(batch BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                         uids BYTEA NOT NULL, spent BYTEA NOT NULL, crc BIGINT NOT NULL);
CREATE TABLE segments(seg BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, uids BYTEA NOT NULL,
                      X BYTEA NOT NULL, target BYTEA NOT NULL, crc BIGINT NOT NULL);
CREATE TABLE trees(round BIGINT PRIMARY KEY, features BYTEA NOT NULL,
                   thresholds BYTEA NOT NULL, leaves BYTEA NOT NULL, crc BIGINT NOT NULL);
CREATE TABLE events(seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind TEXT NOT NULL,
                    info TEXT NOT NULL, data BYTEA, crc BIGINT NOT NULL);
CREATE TABLE snapshot(id INTEGER PRIMARY KEY CHECK (id = 0), seq BIGINT NOT NULL,
                      last_seg BIGINT NOT NULL, uids BYTEA NOT NULL, margin BYTEA NOT NULL,
                      spent BYTEA NOT NULL, crc BIGINT NOT NULL);
"""
log = logging.getLogger("renyiboost.store")

_TABLES = ("meta", "keys", "retirements", "segments", "trees", "events", "snapshot")
#: Where each store's epoch and commits are recorded, outside its schema (a restore of an
#: older dump of the schema leaves this table as it was, so the store is seen to be behind).
RECORDS = '"renyiboost_records"."stores"'
_RECORDS_SCHEMA = (
    'CREATE SCHEMA IF NOT EXISTS "renyiboost_records"',
    (f"CREATE TABLE IF NOT EXISTS {RECORDS}(schema_name TEXT PRIMARY KEY, "
    "store_id TEXT NOT NULL, epoch BIGINT NOT NULL, commits BIGINT NOT NULL)"),
)

#: Seconds a store's opening waits for a holder that is a dead process of this host.
DEAD_HOLDER_WAIT = 30.0


def _holder_name(pid: int) -> str:
    """The ``application_name`` a store's session carries: who holds it, for the refusal."""
    return f"renyiboost pid {pid} on {socket.gethostname()}"[:63]


def _gone_from_this_host(application_name: str | None) -> bool:
    """Whether a lock holder's session names a renyiboost process of this host that no
    longer exists (its session outlives it until the server notices)."""
    match = re.fullmatch(r"renyiboost pid (\d+) on .*", application_name or "")
    if match is None or application_name != _holder_name(int(match[1])):
        return False
    try:
        os.kill(int(match[1]), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's): alive
        return False
    return False


#: First half of the advisory lock's two-integer key: says the lock is a renyiboost store's.
_LOCK_CLASS = 0x52425354  # "RBST"

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _psycopg() -> Any:
    try:
        import psycopg
    except ModuleNotFoundError as error:  # pragma: no cover - depends on the install
        raise ModuleNotFoundError(
            "the PostgreSQL state store needs psycopg 3: pip install 'renyiboost[postgres]'"
        ) from error
    return psycopg


def split_url(url: str, schema: str | None = None) -> tuple[str, str]:
    """``postgresql://…[?schema=name]`` → (the URL psycopg connects to, the schema name).

    >>> split_url("postgresql://u@db:5432/state?schema=shard_0&sslmode=require")
    ('postgresql://u@db:5432/state?sslmode=require', 'shard_0')
    """
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError("a PostgreSQL store URL starts with postgresql://, got "
                         f"{without_password(url)!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = [value for key, value in query if key == "schema"]
    rest = [(key, value) for key, value in query if key != "schema"]
    name = schema or (named[-1] if named else "renyiboost")
    if not _SCHEMA_NAME.fullmatch(name):
        raise ValueError(f"schema must be a lower-case SQL name (letters, digits, _), got {name!r}")
    return _joined(parts.scheme, parts.netloc, parts.path, urlencode(rest)), name


def place(url: str) -> str:
    """Where the store ``url`` names lives, spelled one way, for telling whether two URLs
    name one store: the host in lower case, the port (5432 when left out), the database
    (libpq's default, the user, when left out) and the schema; who connects and how is left
    out. Reshard compared the URLs as written, so ``postgresql://u@DB/s`` and
    ``postgres://u:pw@db:5432/s`` were two stores until one of them was found locked
    (review H #7).

    >>> place("postgres://u:pw@DB/state?sslmode=require") == place("postgresql://u@db:5432/state")
    True
    """
    base, schema = split_url(url)
    try:
        parts = _psycopg().conninfo.conninfo_to_dict(base)
    except _psycopg().Error:  # libpq will refuse it when it opens; compare it as written
        return f"{base}#{schema}"
    host = str(parts.get("host") or "")
    host = host if host.startswith("/") else host.lower()  # a socket directory keeps its case
    dbname = parts.get("dbname") or parts.get("user") or ""
    # a service file or a host address can name another server under the same host text
    rest = {key: parts[key] for key in ("service", "hostaddr") if parts.get(key)}
    return f"postgresql://{host}:{parts.get('port') or 5432}/{dbname}#{schema}" + (
        f"?{sorted(rest.items())}" if rest else "")


def _joined(scheme: str, netloc: str, path: str, query: str) -> str:
    """A PostgreSQL URL from its parts, ``//`` kept when the host is empty
    (``postgresql:///db?host=/run/postgresql``, libpq's Unix socket: ``urlunsplit`` wrote
    ``postgresql:/db``, which libpq refuses: review C)."""
    return f"{scheme}://{netloc}{path}" + (f"?{query}" if query else "")


def stores_in(url: str, prefix: str, *, live: bool = False) -> list[str]:
    """The schemas of ``url``'s database whose names start with ``prefix`` and hold a state
    store (a ``meta`` table), read without opening them (no lock, no epoch): what a
    deployment of shards must check before it creates or opens its own. With ``live``,
    stores that ``renyiboost reshard`` retired (they stay, tombstoned) are left out."""
    base, _ = split_url(url)
    pattern = prefix.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%") + "%"
    try:
        with _psycopg().connect(base, autocommit=True) as db:
            names = sorted(row[0] for row in db.execute(
                "SELECT table_schema FROM information_schema.tables "
                "WHERE table_name = 'meta' AND table_schema LIKE %s", (pattern,)).fetchall())
            if live:
                names = [name for name in names if _SCHEMA_NAME.fullmatch(name) and db.execute(
                    f'SELECT 1 FROM "{name}".meta WHERE name = %s',  # a checked name
                    ("side:resharded",)).fetchone() is None]
    except _psycopg().Error as error:
        raise StateStoreError(f"cannot list the state stores at {without_password(base)}: "
                              f"{scrubbed(error, base)}".strip()) from None  # its text: the URL
    return names


def scrubbed(error: BaseException, url: str) -> str:
    """``error``'s text with every password ``url`` holds shown as ``***``, as written and
    percent-decoded: libpq quotes a malformed part of the URL whole, the password too
    (``invalid percent-encoded token: "S3cr%ZZet"``: review H)."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    secrets = {userinfo.partition(":")[2]} if ":" in userinfo else set()
    secrets |= {value for key, _, value in (part.partition("=")
                                            for part in parts.query.split("&"))
                if "password" in key.lower()}
    secrets |= {unquote(secret) for secret in secrets}
    text = str(error)
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        # a short one only where quoted: replaced everywhere, a password "a" garbled the
        # whole message (review D6)
        text = (text.replace(secret, "***") if len(secret) >= 4
                else text.replace(f'"{secret}"', '"***"'))
    return text


def without_password(url: str) -> str:
    """``url`` for a message or a log: a password shown as ``***``, in ``user:password@``
    and in libpq's ``password=`` parameter (which was printed whole: review C).

    >>> without_password("postgresql://u:pw@db/s?password=pw2&schema=x")
    'postgresql://u:***@db/s?password=***&schema=x'
    """
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    secret = [("password" in key.lower()) for key, _ in pairs]  # sslpassword, PASSWORD too
    if parts.password is None and not any(secret):
        return url
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username}:***@{netloc.rsplit('@', 1)[1]}"
    query = urlencode([(key, "***" if hidden else value)
                       for (key, value), hidden in zip(pairs, secret, strict=True)], safe="*")
    return _joined(parts.scheme, netloc, parts.path, query)


class PostgresStore(SQLStateStore):
    """The durable store in a schema of a PostgreSQL database (see the module docstring).

    Parameters
    ----------
    url
        ``postgresql://user[:password]@host[:port]/database``, optionally with
        ``?schema=name``; libpq's other parameters (``sslmode``, …) pass through.
    schema
        The schema that holds the store (overrides the URL's; default ``renyiboost``). One
        schema, one store: shards of a deployment each take their own.
    create
        ``False`` (default): open an existing store and refuse anything else. ``True``:
        create a new store and refuse a schema that already holds one.
    snapshot_ratio, continues, meta
        As for :class:`~renyiboost.stream.store.SQLiteStore`.
    """

    _schema = _SCHEMA
    #: Whether this store's session holds the advisory lock (``close`` releases it).
    _locked = False

    def __init__(self, url: str, *, schema: str | None = None, create: bool = False,
                 snapshot_ratio: float = SNAPSHOT_RATIO,
                 continues: StoreIdentity | None = None,
                 meta: Mapping[str, Any] | None = None) -> None:
        psycopg = _psycopg()
        self._database_error = psycopg.Error
        self.url, self.schema = split_url(url, schema)
        self.snapshot_ratio = snapshot_ratio
        holder = _holder_name(os.getpid())
        try:
            self._db = psycopg.connect(self.url, autocommit=True, application_name=holder)
        except psycopg.Error as error:
            raise StateStoreError(f"cannot connect to the state store {self.location}: "
                                  f"{scrubbed(error, self.url)}".strip()) from None  # (D6)
        try:
            self._check_durable()
            self._lock()
            if create:
                self._check_absent()
            elif not self._has_table("meta"):
                raise StoreNotFound(f"no state store at {self.location}. {NEVER_IMPLICIT}")
            self._start(create, continues, meta)
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r})"

    @property
    def location(self) -> str:
        return f"{without_password(self.url)} schema {self.schema}"

    # ------------------------------------------------------------------ dialect
    def _sql(self, statement: str) -> str:
        return statement.replace("?", "%s")

    def _connection_lost(self) -> bool:
        return bool(self._db.closed) or self._db.info.transaction_status == (
            _psycopg().pq.TransactionStatus.UNKNOWN)

    def _in_transaction(self) -> bool:
        # A lost connection (UNKNOWN) has no transaction left: the server rolled it back.
        status = _psycopg().pq.TransactionStatus
        return self._db.info.transaction_status in (status.INTRANS, status.INERROR)

    def _has_table(self, name: str) -> bool:
        return self._db.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
            "AND table_name = %s", (self.schema, name)).fetchone() is not None

    def _has_column(self, table: str, column: str) -> bool:
        return self._db.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s AND column_name = %s",
            (self.schema, table, column)).fetchone() is not None

    # ------------------------------------------------------------------ opening
    def _check_durable(self) -> None:
        """``COMMIT`` must return only once the commit is on disk (invariant 4)."""
        (fsync,) = self._db.execute("SHOW fsync").fetchone()
        if fsync != "on":
            raise StateStoreError(
                f"the PostgreSQL server of {self.location} runs with fsync = {fsync}: a power "
                "loss could undo a commit whose tree was already published. Use a server with "
                "fsync = on for a state store.")
        self._db.execute("SET synchronous_commit TO on")

    def _lock_key(self) -> int:
        digest = hashlib.sha256(f"renyiboost store {self.schema}".encode()).digest()
        return int.from_bytes(digest[:4], "big") & 0x7FFF_FFFF

    def _lock(self) -> None:
        """One process at a time: a session advisory lock, dropped when the session ends.

        A holder that is a renyiboost process of this host which no longer exists (killed:
        its name carries its pid) is waited for, up to :data:`DEAD_HOLDER_WAIT` seconds:
        the server ends a vanished client's session only after noticing the hang-up (and
        after a commit's disk sync), so a trainer restarted at once by a supervisor was
        refused its own store. A live holder, or one of another host, is refused at once."""
        key = self._lock_key()
        deadline = time.monotonic() + DEAD_HOLDER_WAIT
        while True:
            (taken,) = self._db.execute("SELECT pg_try_advisory_lock(%s, %s)",
                                        (_LOCK_CLASS, key)).fetchone()
            if taken:
                self._locked = True
                return
            row = self._db.execute(
                "SELECT a.application_name, a.client_addr FROM pg_locks l "
                "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
                "AND l.granted AND l.classid = %s AND l.objid = %s AND l.objsubid = 2",
                (_LOCK_CLASS, key)).fetchone()
            if not (row and _gone_from_this_host(row[0])) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        holder = (f"{row[0] or 'a client without a name'} (from {row[1] or 'a local socket'})"
                  if row else "another process")
        raise StoreLocked(
            f"the state store {self.location} is in use by {holder}; one process at a time "
            "may hold a store (stop that one first)")

    def _check_absent(self) -> None:
        found = [name for name in _TABLES if self._has_table(name)]
        if found:
            raise LedgerConflict(
                f"{self.location} already holds state store tables ({', '.join(found)}); a new "
                "state store is never created over an old one (its keys' budgets would "
                "restart). Open it instead, or choose a new schema.")
        self._records = self._ensure_records()
        recorded = self._recorded()
        if recorded is not None:
            raise LedgerConflict(
                f"{RECORDS} records a state store (id {recorded[0]}) that was at "
                f"{self.location} and is gone (a store discarded by renyiboost takes its record "
                "with it): a new store there would give its keys fresh budgets. Restore the "
                "lost store, or, if its keys will never come again, delete its row of "
                f"{RECORDS} and create the store.")
        self._db.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')

    def _start(self, create: bool, continues: StoreIdentity | None = None,
               meta: Mapping[str, Any] | None = None) -> None:
        self._db.execute(f'SET search_path TO "{self.schema}"')
        if not create:  # a new store ensured the record table in _check_absent
            self._records = self._ensure_records()
        super()._start(create, continues, meta)

    def _ensure_records(self) -> bool:
        """Create the record table beside the stores' schemas if it is not there (outside
        any transaction); whether the store can keep its record there. A role that may not
        create it is warned once that a restored older dump would not be seen."""
        psycopg = _psycopg()
        for statement in _RECORDS_SCHEMA:
            try:
                self._db.execute(statement)
            except psycopg.errors.UniqueViolation:  # another store created it meanwhile
                pass
            except psycopg.errors.InsufficientPrivilege as error:
                log.warning("%s: cannot create %s (%s): a restore of an older dump of this "
                            "store's schema will not be detected; create it, or grant the "
                            "role CREATE on the database", self.location, RECORDS, error)
                return False
        return True

    def _recorded(self) -> tuple[str, int, int] | None:
        if not self._records:
            return None
        row = self._db.execute(f"SELECT store_id, epoch, commits FROM {RECORDS} "
                               "WHERE schema_name = %s", (self.schema,)).fetchone()
        return None if row is None else (str(row[0]), int(row[1]), int(row[2]))

    def _home(self) -> dict[str, str]:
        (database,) = self._db.execute("SELECT current_database()").fetchone()
        return {"database": str(database), "schema": self.schema}

    def _home_name(self, home: Any) -> str:
        return f"database {home.get('database')} schema {home.get('schema')}"

    def _holds_store(self, home: Any, store_id: str) -> bool:
        """Whether another schema of this database holds a store with this id (a store
        recorded in another database cannot be looked at from here). Read under a
        savepoint: an error would end the open's transaction. A home this role may not read
        is refused (it may hold the original); another program's ``meta`` table is none."""
        if not isinstance(home, dict) or home.get("database") != self._home()["database"]:
            return False
        schema = str(home.get("schema"))
        if not _SCHEMA_NAME.fullmatch(schema) or self._db.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None:
            return False
        psycopg = _psycopg()
        self._db.execute("SAVEPOINT renyiboost_home")
        try:
            row = self._db.execute(f'SELECT value FROM "{schema}".meta WHERE name = %s',
                                   ("identity",)).fetchone()
            return row is not None and json.loads(row[0]).get("store_id") == store_id
        except psycopg.errors.InsufficientPrivilege as error:
            self._db.execute("ROLLBACK TO SAVEPOINT renyiboost_home")
            raise LedgerConflict(
                f"{self.location} was created in schema {schema}, which this role may not "
                f"read ({str(error).strip()}): it may be a copy of the store there, and a "
                "copy beside its original gives every key two budgets. Grant the role USAGE "
                f"on {schema} and SELECT on its meta table, or open the store there."
            ) from None
        except (psycopg.Error, ValueError, AttributeError):  # not a store's meta table
            self._db.execute("ROLLBACK TO SAVEPOINT renyiboost_home")
            return False
        finally:
            self._db.execute("RELEASE SAVEPOINT renyiboost_home")

    def _check_not_behind(self, store_id: str, epoch: int, commits: int) -> None:
        """Refuse the store if it is behind the epoch, or the commits of that epoch, that
        the record table outside its schema holds (:data:`RECORDS`): the schema was
        restored from an older dump, so its keys' spent budgets went back while what they
        paid for was already released. The SQLite store checks the same against the file
        beside it. A whole database restored with the table in it is not seen."""
        recorded = self._recorded()
        if recorded is None or recorded[0] != store_id:
            return
        _, seen_epoch, seen_commits = recorded
        if seen_epoch > epoch or (seen_epoch == epoch and seen_commits > commits):
            raise LedgerConflict(
                f"the state store {self.location} is at epoch {epoch} after {commits} "
                f"commits, behind epoch {seen_epoch} after {seen_commits} commits that it "
                f"reached before ({RECORDS}): it was restored from an older dump, so its "
                "keys' spent budgets went back while what they paid for was already "
                "released. Restore the newest dump; a store never resumes from an older one.")

    def _write_record(self, store_id: str, epoch: int, commits: int) -> None:
        self._db.execute(
            f"INSERT INTO {RECORDS}(schema_name, store_id, epoch, commits) VALUES "
            "(%s, %s, %s, %s) ON CONFLICT (schema_name) DO UPDATE SET store_id = "
            "excluded.store_id, epoch = excluded.epoch, commits = excluded.commits",
            (self.schema, store_id, epoch, commits))

    def _record_in_transaction(self, store_id: str, epoch: int, commits: int) -> None:
        if self._records:
            self._write_record(store_id, epoch, commits)

    #: The open's record is the same upsert, after the epoch's own transaction.
    _record_epoch = _record_in_transaction

    def _remove(self) -> None:
        """Drop the schema and its record in one transaction (PostgreSQL's DDL is
        transactional): a kill between two autocommit statements left a record of a store
        that was gone, and every rerun of an interrupted reshard was refused (review H)."""
        with self._db.transaction():
            self._db.execute(f'DROP SCHEMA "{self.schema}" CASCADE')
            if self._records:
                self._db.execute(f"DELETE FROM {RECORDS} WHERE schema_name = %s",
                                 (self.schema,))
        self.close()

    def close(self) -> None:
        """Release the lock, then end the session.

        Ending the session alone would drop the lock too, but the server's backend exits
        after the client has hung up, so a store reopened at once (a restart, a reshard)
        could still find its own lock held and be refused (seen in CI). The explicit unlock
        is answered before ``close`` returns; if it fails, the session's end drops it.

        In a process forked from the one that opened it, nothing is sent: the socket is the
        parent's, and the child's unlock and hang-up released the parent's lock and ended
        its session while it still held the store (review H). psycopg likewise leaves a
        connection inherited over a fork alone."""
        if self._db.closed:
            return
        if os.getpid() != getattr(self, "_opened_by", os.getpid()):  # set by _start
            return
        if self._locked:
            self._locked = False
            with contextlib.suppress(self._database_error):
                self._db.execute("SELECT pg_advisory_unlock(%s, %s)",
                                 (_LOCK_CLASS, self._lock_key()))
        self._db.close()
