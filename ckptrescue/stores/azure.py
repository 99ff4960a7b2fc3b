"""The Azure Blob backend (``azure-storage-blob``), read-only by construction.

Every request of the SDK client built here — whichever client object (service, container, blob)
and whichever method sends it — passes :class:`ReadOnlyTransport.send`, the last step before the
wire. It names the operation from the HTTP method and the ``restype``/``comp`` query
(:func:`operation_of`) and raises :class:`~ckptrescue.errors.RefusedError` for anything outside
:data:`READ_OPERATIONS` before a byte is sent: Put Blob/Block/Block List, Delete Blob, Set Blob
Metadata/Properties/Tags/Tier, snapshots, leases, copies, undelete, immutability changes — all
refused, whoever calls them.

Credentials come from the usual environment: ``AZURE_STORAGE_CONNECTION_STRING``, else
``AZURE_STORAGE_KEY`` (with the account from the URL), else ``AZURE_STORAGE_SAS_TOKEN``, else
``azure-identity``'s ``DefaultAzureCredential`` when installed, else anonymous (public
containers). The endpoint is ``https://ACCOUNT.blob.core.windows.net`` unless ``--endpoint-url``,
``CKPTRESCUE_AZURE_BLOB_ENDPOINT`` or the connection string's ``BlobEndpoint`` says otherwise
(Azurite: ``http://127.0.0.1:10000/devstoreaccount1``).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from ckptrescue.errors import CkptRescueError, RemoteError, UsageError
from ckptrescue.stores.base import (
    MiB,
    Notes,
    ObjectInfo,
    Protection,
    Store,
    StoreOptions,
    StoreStats,
)
from ckptrescue.stores.urls import StoreUrl

READ_OPERATIONS = frozenset({
    "GetBlob", "GetBlobProperties", "GetBlobMetadata", "GetBlobTags", "GetBlockList",
    "GetPageRanges", "ListBlobs", "ListContainers", "GetContainerProperties",
    "GetContainerMetadata", "GetContainerACL", "GetBlobServiceProperties",
    "GetAccountInformation",
})

_READ_COMPS = {
    # (restype, comp) -> operation, for GET/HEAD
    ("service", "properties"): "GetBlobServiceProperties",
    ("account", "properties"): "GetAccountInformation",
    ("container", "list"): "ListBlobs",
    ("container", "metadata"): "GetContainerMetadata",
    ("container", "acl"): "GetContainerACL",
    ("container", None): "GetContainerProperties",
    (None, "list"): "ListContainers",
    (None, "blocklist"): "GetBlockList",
    (None, "metadata"): "GetBlobMetadata",
    (None, "tags"): "GetBlobTags",
    (None, "pagelist"): "GetPageRanges",
}


def operation_of(method: str, url: str) -> str:
    """The Blob service operation a request performs (pure). Reads get their REST API name;
    anything else is named by method and query (e.g. ``PUT comp=metadata``)."""
    query = parse_qs(urlsplit(url).query)
    restype = (query.get("restype") or [None])[0]
    comp = (query.get("comp") or [None])[0]
    method = method.upper()
    if method in ("GET", "HEAD"):
        if restype is None and comp is None:
            return "GetBlob" if method == "GET" else "GetBlobProperties"
        name = _READ_COMPS.get((restype, comp))
        if name is not None:
            return name
    described = " ".join(f"{k}={v}" for k, v in (("restype", restype), ("comp", comp)) if v)
    return f"{method} {described}".strip()


def _transport_class() -> type:
    from azure.core.pipeline.transport import RequestsTransport

    class ReadOnlyTransport(RequestsTransport):  # type: ignore[misc]
        """The one place every Azure request passes: refuses non-read operations, counts."""

        def __init__(self, stats: StoreStats, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.ckptrescue_stats = stats

        def send(self, request: Any, **kwargs: Any) -> Any:
            self.ckptrescue_stats.admit(operation_of(request.method, request.url),
                                        READ_OPERATIONS, "Azure Blob")
            return super().send(request, **kwargs)

    return ReadOnlyTransport


def _connection_string() -> dict[str, str]:
    text = os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "")
    out = {}
    for part in text.split(";"):
        key, sep, value = part.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def credential_and_endpoint(account: str, options: StoreOptions) -> tuple[Any, str]:
    """(credential, account URL) from options and the usual environment (module doc)."""
    conn = _connection_string()
    endpoint = (options.endpoint_url or os.environ.get("CKPTRESCUE_AZURE_BLOB_ENDPOINT")
                or conn.get("BlobEndpoint") or f"https://{account}.blob.core.windows.net")
    credential: Any = None
    if conn.get("AccountKey"):
        credential = {"account_name": conn.get("AccountName", account),
                      "account_key": conn["AccountKey"]}
    elif conn.get("SharedAccessSignature"):
        credential = conn["SharedAccessSignature"]
    elif os.environ.get("AZURE_STORAGE_KEY"):
        credential = {"account_name": account, "account_key": os.environ["AZURE_STORAGE_KEY"]}
    elif os.environ.get("AZURE_STORAGE_SAS_TOKEN"):
        credential = os.environ["AZURE_STORAGE_SAS_TOKEN"]
    else:
        try:
            from azure.identity import DefaultAzureCredential
        except ImportError:
            credential = None
        else:
            credential = DefaultAzureCredential(exclude_interactive_browser_credential=True)
    return credential, endpoint.rstrip("/")


def make_service_client(account: str, options: StoreOptions, stats: StoreStats) -> Any:
    """A ``BlobServiceClient`` whose every request passes :class:`ReadOnlyTransport`."""
    try:
        from azure.storage.blob import BlobServiceClient
    except ImportError as exc:
        raise UsageError("azure-storage-blob is not installed",
                         hint="pip install 'ckptrescue[azure]'") from exc
    credential, endpoint = credential_and_endpoint(account, options)
    transport = _transport_class()(stats, connection_timeout=10, read_timeout=120)
    return BlobServiceClient(endpoint, credential=credential, transport=transport,
                             retry_total=3)


def translate(exc: BaseException, what: str) -> CkptRescueError:
    """One-line kit error for an Azure SDK failure."""
    if isinstance(exc, CkptRescueError):
        return exc
    from azure.core import exceptions as ax

    if isinstance(exc, ax.ResourceNotFoundError):
        code = getattr(exc, "error_code", None) or "not found"
        return UsageError(f"{what}: {code}")
    if isinstance(exc, ax.ClientAuthenticationError):
        return RemoteError(f"{what}: access denied ({getattr(exc, 'error_code', '')})",
                           hint="check AZURE_STORAGE_CONNECTION_STRING / AZURE_STORAGE_KEY / SAS")
    if isinstance(exc, ax.ServiceRequestError):
        return RemoteError(f"{what}: cannot reach the Azure Blob endpoint ({exc})",
                           hint="check --endpoint-url / CKPTRESCUE_AZURE_BLOB_ENDPOINT")
    if isinstance(exc, ax.HttpResponseError):
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return RemoteError(f"{what}: {first}")
    return RemoteError(f"{what}: {type(exc).__name__}: {exc}")


def _b64(value: Any) -> str | None:
    if not value:
        return None
    return base64.b64encode(bytes(value)).decode()


def _iso(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


class AzureStore(Store):
    scheme: ClassVar[str] = "az"
    READ_OPERATIONS: ClassVar[frozenset[str]] = READ_OPERATIONS

    def __init__(self, url: StoreUrl, options: StoreOptions) -> None:
        super().__init__(url, options)
        self.service = make_service_client(url.account, options, self.stats)
        self.container = self.service.get_container_client(url.bucket)

    def _info(self, props: Any, *, is_latest: bool = True) -> ObjectInfo:
        settings = getattr(props, "content_settings", None)
        hashes = {}
        md5 = _b64(getattr(settings, "content_md5", None))
        if md5:
            hashes["md5"] = md5
        snapshot = getattr(props, "snapshot", None)
        version_id = getattr(props, "version_id", None)
        deleted = bool(getattr(props, "deleted", False))
        kind = "soft-deleted" if deleted else "snapshot" if snapshot else "version"
        policy = getattr(props, "immutability_policy", None)
        details: dict[str, Any] = {
            "blob_type": str(getattr(props, "blob_type", "") or "") or None,
            "snapshot": snapshot, "version_id": version_id,
            "is_current_version": getattr(props, "is_current_version", None),
            "has_legal_hold": getattr(props, "has_legal_hold", None),
            "immutability_policy": {
                "expiry_time": _iso(getattr(policy, "expiry_time", None)),
                "policy_mode": getattr(policy, "policy_mode", None)} if policy else None,
        }
        if deleted:
            details["deleted_time"] = _iso(getattr(props, "deleted_time", None))
            details["remaining_retention_days"] = getattr(props, "remaining_retention_days", None)
        current = getattr(props, "is_current_version", None)
        latest = is_latest and not snapshot and not deleted and current is not False
        return ObjectInfo(key=props.name, size=int(props.size or 0),
                          version=snapshot or version_id, etag=props.etag,
                          last_modified=_iso(props.last_modified), hashes=hashes,
                          is_latest=latest, deleted=deleted, soft_deleted=deleted, kind=kind,
                          details=details)

    def blob_client(self, obj_key: str, obj: ObjectInfo | None = None) -> Any:
        snapshot = obj.details.get("snapshot") if obj is not None else None
        return self.container.get_blob_client(obj_key, snapshot=snapshot)

    def mismatch_detail(self, obj: ObjectInfo) -> dict[str, Any]:
        """A block blob's committed blocks (count, sizes): where a mismatch could sit."""
        if "BLOCK" not in str(obj.details.get("blob_type") or "").upper():
            return {}
        try:
            committed, _ = self.blob_client(obj.key, obj).get_block_list("committed")
        except Exception as exc:
            return {"block_list": {
                "error": translate(exc, self.url_of(obj.key, obj.version)).message}}
        return {"block_list": {
            "blocks": len(committed), "sizes": [b.size for b in committed][:1000],
            "note": "the service keeps no per-block MD5: sizes locate, they do not verify"}}

    def unreadable(self, info: ObjectInfo) -> str | None:
        if info.soft_deleted:
            return "soft-deleted blob: unreadable without undelete (never done)"
        return None

    def judge(self, settings: dict[str, Any]) -> Protection:
        return judge_azure(settings)

    def head(self, key: str, version: str | None = None) -> ObjectInfo:
        try:
            blob = self.container.get_blob_client(key)
            if version and "T" in version and version.endswith("Z") and "." in version:
                # snapshot and version ids are both timestamps; try the version id first
                try:
                    return self._info(blob.get_blob_properties(version_id=version))
                except Exception:
                    blob = self.container.get_blob_client(key, snapshot=version)
                    return self._info(blob.get_blob_properties())
            return self._info(blob.get_blob_properties())
        except Exception as exc:
            raise translate(exc, self.url_of(key, version)) from exc

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        try:
            items = [self._info(p) for p in self.container.list_blobs(name_starts_with=prefix)]
        except Exception as exc:
            raise translate(exc, self.url.child(prefix)) from exc
        return sorted((i for i in items if not i.key.endswith("/")), key=lambda i: i.key)

    def list_versions(self, prefix: str) -> dict[str, list[ObjectInfo]]:
        seen: dict[tuple[str, str | None, str | None, bool], ObjectInfo] = {}
        try:
            for props in self.container.list_blobs(name_starts_with=prefix,
                                                   include=["snapshots", "versions"]):
                info = self._info(props)
                seen[(info.key, info.details["snapshot"], info.details["version_id"],
                      False)] = info
            try:
                for props in self.container.list_blobs(name_starts_with=prefix,
                                                       include=["deleted"]):
                    if getattr(props, "deleted", False):
                        info = self._info(props)
                        seen[(info.key, info.details["snapshot"], info.details["version_id"],
                              True)] = info
            except Exception as exc:  # soft-delete listing refused: say so, keep the rest
                for info in seen.values():
                    info.details.setdefault("soft_delete_listing", f"unavailable: {exc}")
        except CkptRescueError:
            raise
        except Exception as exc:
            raise translate(exc, self.url.child(prefix)) from exc
        out: dict[str, list[ObjectInfo]] = {}
        for info in seen.values():
            out.setdefault(info.key, []).append(info)
        for key in out:  # newest first: current, then by time (snapshot/version ids are times)
            out[key].sort(key=lambda i: (not i.is_latest, _neg(i.version or i.last_modified)))
        return dict(sorted(out.items()))

    def _download(self, obj: ObjectInfo, offset: int | None, length: int | None) -> Any:
        from azure.core import MatchConditions

        kwargs: dict[str, Any] = {"max_concurrency": 1}
        if obj.details.get("version_id") and not obj.details.get("snapshot"):
            kwargs["version_id"] = obj.details["version_id"]
        elif obj.etag and obj.kind == "version":
            kwargs.update(etag=obj.etag, match_condition=MatchConditions.IfNotModified)
        return self.blob_client(obj.key, obj).download_blob(offset=offset, length=length, **kwargs)

    def read_range(self, obj: ObjectInfo, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        try:
            data: bytes = self._download(obj, start, length).readall()
        except Exception as exc:
            raise translate(exc, self.url_of(obj.key, obj.version)) from exc
        return data

    def iter_content(self, obj: ObjectInfo, chunk: int = 8 * MiB) -> Iterator[bytes]:
        offset = 0
        while offset < obj.size:
            n = min(chunk, obj.size - offset)
            yield self.read_range(obj, offset, n)
            offset += n

    def settings(self) -> dict[str, Any]:
        out: dict[str, Any] = {"container": self.url.bucket, "account": self.url.account}
        try:
            props = self.container.get_container_properties()
            out["has_immutability_policy"] = bool(props.has_immutability_policy)
            out["has_legal_hold"] = bool(props.has_legal_hold)
            out["immutable_storage_with_versioning"] = props.immutable_storage_with_versioning_enabled
        except Exception as exc:
            out["container_error"] = translate(exc, self.url.child("")).message
        try:
            service = self.service.get_service_properties()
            retention = service.get("delete_retention_policy")
            out["soft_delete"] = {"enabled": bool(getattr(retention, "enabled", False)),
                                  "days": getattr(retention, "days", None)}
        except Exception as exc:
            out["service_error"] = translate(exc, f"az://{self.url.account}").message
        # Versioning is an account setting of the management plane; the data plane shows it by
        # the x-ms-version-id each blob carries.
        try:
            page = next(iter(self.container.list_blobs(results_per_page=1).by_page()), None)
            first = next(iter(page), None) if page is not None else None
            out["versioning"] = (None if first is None
                                 else getattr(first, "version_id", None) is not None)
        except Exception as exc:
            out["versioning_error"] = translate(exc, self.url.child("")).message
        return out


def _neg(text: str | None) -> str:
    # newest first with a plain sort: invert each character of an ISO time string
    return "".join(chr(0x10FFFF - ord(c)) for c in (text or ""))


def judge_azure(s: dict[str, Any]) -> Protection:
    """What a container's settings (:meth:`AzureStore.settings`) mean for the evidence (pure)."""
    notes = Notes()
    if "container_error" in s:
        notes.not_read(f"container properties: {s['container_error']}")
    immutable = bool(s.get("has_immutability_policy") or s.get("has_legal_hold")
                     or s.get("immutable_storage_with_versioning"))
    soft = s.get("soft_delete") or {}
    if "service_error" in s:
        notes.not_read(f"soft delete (service properties): {s['service_error']}")
    elif not soft.get("enabled"):
        notes.warn("no-soft-delete", "blob soft delete is off: a deleted blob is gone at once")
    versioning = s.get("versioning")
    if versioning is None:
        notes.not_read("versioning: not visible from the data plane (no blob, or no "
                       "x-ms-version-id)")
    elif not versioning:
        notes.warn("versioning", "blob versioning looks off: blobs carry no version id")
    if not immutable and "container_error" not in s:
        notes.warn("no-lock", "no immutability policy or legal hold on the container")
    if immutable:
        notes.issues.append(("immutable", f"{s.get('container')}: keeps immutable versions"))
        return notes.judged("immutable")
    if versioning or soft.get("enabled"):
        return notes.judged("versioned")
    return notes.judged("unknown" if "container_error" in s else "unprotected")
