# What the topic and subscription-group managers share: a versioned document, persisted.
"""The life of a versioned metadata document (topics.json, subscriptionGroup.json): a change
moves its data version on, is persisted and announced; a slave takes its master's document
whole when the versions differ. The managers differ only in what the document holds and where
it is written (:meth:`VersionedDocumentManager.persist`)."""
from collections.abc import Callable
from typing import Any

from pybroker.store.config_docs import DataVersion


class VersionedDocumentManager:
    """Base of a manager whose ``document`` has a ``data_version``; subclasses write it in
    :meth:`persist`. ``on_change`` is called after every change (the metadata service's)."""

    document: Any
    on_change: Callable[[], None]

    @property
    def data_version(self) -> DataVersion:
        """The document's data version (counter + 1 and a new timestamp per change)."""
        return self.document.data_version

    def persist(self) -> None:
        """Write the document (safe write, see pybroker.store.config_docs)."""
        raise NotImplementedError

    def replace_from_master(self, document) -> bool:
        """A slave takes its master's document when the data version differs (Java's
        SlaveSynchronize clears the table and puts all, keeping the master's version);
        persisted. True when taken."""
        if document.data_version == self.document.data_version:
            return False
        self.document = document
        self.persist()
        self.on_change()
        return True

    def _changed(self) -> None:
        self.document.data_version.next_version()
        self.persist()
        self.on_change()
