"""The state a :class:`~osumem.memory.Memory` holds (store, config, namespace and
retriever caches, planner, editor) and how it keeps up with other writers;
the reading and writing methods build on it (:mod:`osumem.memory.reads`,
:mod:`osumem.memory.writes`).
"""

from __future__ import annotations

from osumem.embed import Encoder
from osumem.errors import (
    InvalidInputError,
)
from osumem.memory.backends import MemoryStore
from osumem.memory.blas import limited
from osumem.memory.config import (
    MemoryConfig,
)
from osumem.memory.editing import StepEditor
from osumem.memory.encoders import resolve_encoder
from osumem.memory.filtered import FilteredRetrievers
from osumem.memory.namespaces import NamespaceCache
from osumem.memory.planner import MessagePlanner
from osumem.memory.retrievers import MethodCaches


class MemoryCore:
    """What every part of :class:`~osumem.memory.Memory` reads and writes."""

    def __init__(
        self,
        store: MemoryStore,
        encoder: Encoder | None,
        config: MemoryConfig,
        *,
        encoder_spec: str | None = None,
        owns_encoder: bool = False,
    ) -> None:
        self.store = store
        self.config = config
        self._encoder = encoder
        self._encoder_spec = encoder_spec
        self._owns_encoder = owns_encoder or encoder_spec is not None
        # dropped namespaces take their retrievers along (every method's)
        self._views = NamespaceCache(store, on_forget=lambda ns: self._methods.forget(ns))
        self._methods = MethodCaches(self._views, config)
        self._retrievers = self._methods.own
        self._planner = MessagePlanner(config, store, self._need_encoder, lambda: self._encoder)
        self._editor = StepEditor(config, store, self._views, self._planner, self._need_encoder)
        self._filtered = FilteredRetrievers()
        #: Catch up with other writers' commits before each call (the default). An owner
        #: that shares this memory between threads (the server) turns it off and calls
        #: :meth:`refresh` itself while no reader runs.
        self.follow_writers = True

    @property
    def take_background_work(self) -> bool:
        """Whether a call takes the background work that is done, such as a similarity
        refresh built on a thread after an add went past it (the default: the first
        call after it is built). Taking it changes the namespace's structure in place,
        so an owner that runs this memory's retrieves on several threads at once (the
        server) turns it off and turns it on only while no retrieve runs (its
        writes)."""
        return bool(self._methods.take_ready)

    @take_background_work.setter
    def take_background_work(self, value: bool) -> None:
        self._methods.take_ready = bool(value)

    @property
    def rebuild_in_background(self) -> bool:
        """Whether a namespace whose structure an edit dropped (:meth:`delete`, a text
        :meth:`update`, another writer's edit) and that needs a replay of at least
        :data:`~osumem.memory.retrievers.REBUILD_BACKGROUND_STEPS` steps to come back
        is rebuilt on a background thread (the default), its retrievals answering
        meanwhile as plain dense search over its current steps does (their ``method``
        says ``"flat"``; :meth:`wait_ready` waits for the rebuild and takes it).
        ``False``: the next call replays before it answers, as smaller namespaces do.
        The server keeps it on for its own method and takes a finished rebuild on its
        store thread (see :meth:`rebuilt`)."""
        return bool(self._methods.rebuild_in_background)

    @rebuild_in_background.setter
    def rebuild_in_background(self, value: bool) -> None:
        self._methods.rebuild_in_background = bool(value)

    def rebuilt(self, namespace: str) -> bool:
        """Whether ``namespace``'s structure was rebuilt in the background
        (:attr:`rebuild_in_background`) and waits for a call to take it: the next one
        that takes background work (:attr:`take_background_work`)."""
        return self._methods.own.rebuilt(namespace)

    @property
    def encoder(self) -> Encoder | None:
        """The encoder (loaded on first use); ``None`` for a vectors-only store."""
        if self._encoder is None and self._encoder_spec:
            self._encoder = resolve_encoder(self._encoder_spec)
            self._encoder_spec = None
        return self._encoder

    def _need_encoder(self, what: str) -> Encoder:
        enc = self.encoder
        if enc is None:
            raise InvalidInputError(
                f"{what}: this memory has no encoder (store encoder {self.store.encoder_id!r}); "
                "pass vectors, or open it with encoder=..."
            )
        return enc

    def _refresh(self, data_version: int | None = None) -> None:
        """Bring the cached namespaces up to what other writers committed
        (``data_version``: the store's, when the caller has just read it)."""
        if self.follow_writers and self._views.refresh(data_version):
            self._methods.drop_causal()

    def _writers_moved(self) -> bool:
        """Inside a write transaction: catch up with other writers and say whether any
        committed since this memory last caught up (just before the transaction, in an
        add). With the write lock held nobody else commits until the end, so when
        nobody did, what the add read before the transaction still holds. A memory
        that does not follow other writers cannot tell: always ``True``."""
        if not self.follow_writers:
            return True
        moved = self._views.refresh()
        if moved:
            self._methods.drop_causal()
        return moved

    @limited
    def refresh(self) -> set[str]:
        """Bring the loaded namespaces up to what other writers (processes, servers)
        committed since, whatever :attr:`follow_writers` says; returns the namespaces
        whose loaded steps changed (their retrievers catch up at their next use; they
        are kept when another writer changed only metadata)."""
        if self._views.refresh():
            self._methods.drop_causal()
        return set(self._views.changed)

    def loaded(self) -> dict[str, int]:
        """The namespaces this memory holds in its caches, with their step counts."""
        return self._views.sizes()
