"""The S3 entry points of the store operations, spelled as the ``s3`` commands and older callers
spell them: a boto3 client (``client``, one made by :func:`~ckptrescue.stores.s3.client.make_client`)
or the options to make one (``client_options``). Each runs the one implementation every store
shares (``stores/verify.py``, ``history.py``, ``preflight.py``, ``preserve.py``,
``restore.py``) over the S3 backend; nothing here decides anything of its own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.errors import UsageError
from ckptrescue.stores import history as _history
from ckptrescue.stores import preflight as _preflight
from ckptrescue.stores import preserve as _preserve
from ckptrescue.stores import restore as _restore
from ckptrescue.stores.history import HistoryResult
from ckptrescue.stores.preflight import PreflightResult
from ckptrescue.stores.preserve import PreserveResult
from ckptrescue.stores.restore import RestoreResult
from ckptrescue.stores.s3.backend import S3Store
from ckptrescue.stores.s3.client import ClientOptions
from ckptrescue.stores.s3.urls import parse_s3_url
from ckptrescue.stores.verify import VerifyFailed, VerifyResult, verify

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

__all__ = ["VerifyFailed", "history", "preflight", "preserve", "restore", "verify_prefix"]


def s3_store(url: str, client_options: ClientOptions | None = None, client: Any = None,
             *, need_key: bool = False) -> S3Store:
    return S3Store.of(parse_s3_url(url, need_key=need_key), client_options, client)


def verify_prefix(url: str, local_dir: Path | str, *, client_options: ClientOptions | None = None,
                  download: bool = False, workers: int = 16,
                  progress: Callable[[int, int, str], None] | None = None,
                  client: Any = None, allow_unverified: bool = False,
                  manifest: Path | str | dict[str, str] | None = None) -> VerifyResult:
    """Verify every object under ``url`` against ``local_dir`` (``stores.verify.verify``)."""
    if not Path(local_dir).is_dir():
        raise UsageError(f"{local_dir}: not a directory")
    options = client_options or ClientOptions(max_pool_connections=workers)
    return verify(url, local_dir, store=s3_store(url, options, client), download=download,
                  workers=workers, progress=progress, allow_unverified=allow_unverified,
                  manifest=manifest)


def history(url: str, *, client_options: ClientOptions | None = None,
            manifest: Path | str | dict[str, str] | None = None,
            cloudtrail: Path | str | None = None, by_content: bool = False,
            client: Any = None) -> HistoryResult:
    return _history.history(url, manifest=manifest, cloudtrail=cloudtrail,
                            by_content=by_content, store=s3_store(url, client_options, client))


def preflight(bucket_url: str, *, client_options: ClientOptions | None = None,
              client: Any = None) -> PreflightResult:
    return _preflight.preflight(bucket_url, store=s3_store(bucket_url, client_options, client))


def preserve(url: str, *, case: Case, all_versions: bool = False,
             client_options: ClientOptions | None = None, client: Any = None,
             progress: Callable[[int, int, str], None] | None = None) -> PreserveResult:
    """Every object (or version) under ``url`` into ``case`` as verified evidence."""
    return _preserve.preserve(url, case=case, all_versions=all_versions, progress=progress,
                              store=s3_store(url, client_options, client))


def restore(url: str, to: Path | str, *, version: str | None = None,
            known_good_manifest: Path | str | None = None,
            client_options: ClientOptions | None = None, evidence: Sequence[str] = (),
            client: Any = None) -> RestoreResult:
    """``version`` (or the last known-good version per the manifest) of one key."""
    parse_s3_url(url, need_key=True)
    if (version is None) == (known_good_manifest is None):
        raise UsageError("give exactly one of --version ID or --known-good --manifest FILE")
    return _restore.restore(url, to, version=version, known_good_manifest=known_good_manifest,
                            evidence=evidence,
                            store=s3_store(url, client_options, client, need_key=True))
