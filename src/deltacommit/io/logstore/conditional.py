"""Commits by atomic put-if-absent: the default for S3 (``If-None-Match: *``) and local paths.

One request makes a commit: the store's conditional create either writes the whole file or
reports that the version exists.  This is the same mechanism delta-rs and object_store use,
so writers of all three exclude each other on the same table.
"""

from __future__ import annotations

from deltacommit.errors import ObjectExistsError, VersionExistsError
from deltacommit.io.logstore.base import CONDITIONAL_MECHANISM, LogStore
from deltacommit.io.storage.base import ObjectStore
from deltacommit.protocol.log.names import commit_path


class ConditionalPutLogStore(LogStore):
    mechanism = CONDITIONAL_MECHANISM

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def write_commit(self, version: int, data: bytes) -> None:
        try:
            self.store.put_if_absent(commit_path(version), data)
        except ObjectExistsError:
            raise VersionExistsError(self.table_uri, version) from None
