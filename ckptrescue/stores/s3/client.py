"""The one place that enforces "the kit never writes to a bucket": a read-only boto3 S3 client.

:func:`make_client` returns a plain boto3 S3 client with a botocore ``before-parameter-build``
handler that raises :class:`~ckptrescue.errors.RefusedError` for every operation outside
:data:`READ_OPERATIONS` — before the request is built, signed or sent. PutObject, DeleteObject(s),
CopyObject, tagging, lifecycle, retention, versioning changes, multipart uploads: all refused,
whoever calls them (our code, s3transfer, a library handed this client).

The handler also counts operations and object bytes downloaded (:func:`stats`), which the
benchmark and the tests use to prove that verification downloads nothing.

:func:`translate_error` turns botocore exceptions into one-line kit errors (exit 2 for bad input
such as a missing bucket or missing credentials, exit 4 for endpoint/permission failures).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from ckptrescue import imports_kept
from ckptrescue.errors import CkptRescueError, RefusedError, RemoteError, UsageError
from ckptrescue.model import JsonObject
from ckptrescue.stores.base import OperationCounts

READ_OPERATIONS = frozenset(
    {
        "HeadObject",
        "GetObject",
        "ListObjectsV2",
        "ListObjects",
        "ListObjectVersions",
        "GetObjectAttributes",
        "GetBucketVersioning",
        "GetObjectLockConfiguration",
        "GetBucketLocation",
        "HeadBucket",
        "GetObjectRetention",
        "GetObjectLegalHold",
    }
)

CHECKSUM_WHEN = ("supported", "required")


@dataclass(frozen=True)
class ClientOptions:
    """How to reach the store. ``None`` values fall back to boto3's usual sources (env vars
    ``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, ``AWS_REGION``/``AWS_DEFAULT_REGION``, shared config)."""

    endpoint_url: str | None = None
    profile: str | None = None
    region: str | None = None
    checksum_when: str = "supported"  # supported | required (for stores that reject CRC trailers)
    max_pool_connections: int = 16
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    max_attempts: int = 3

    def to_json(self) -> JsonObject:
        return {
            "endpoint_url": self.endpoint_url,
            "profile": self.profile,
            "region": self.region,
            "checksum_when": self.checksum_when,
        }


@dataclass
class ClientStats(OperationCounts):
    """Operations called through a client and object bytes downloaded (thread-safe)."""

    bytes_downloaded: int = 0

    def add_bytes(self, n: int) -> None:
        with self._lock:
            self.bytes_downloaded += n


def make_client(
    endpoint_url: str | None = None,
    profile: str | None = None,
    region: str | None = None,
    checksum_when: str = "supported",
    *,
    max_pool_connections: int = 16,
    options: ClientOptions | None = None,
) -> Any:
    """A boto3 S3 client that can only read (see module doc). Pass ``options`` or keywords."""
    if options is None:
        options = ClientOptions(
            endpoint_url=endpoint_url,
            profile=profile,
            region=region,
            checksum_when=checksum_when,
            max_pool_connections=max_pool_connections,
        )
    if options.checksum_when not in CHECKSUM_WHEN:
        raise UsageError(
            f"--checksum-when must be one of {', '.join(CHECKSUM_WHEN)}, "
            f"not {options.checksum_when!r}"
        )
    try:
        with imports_kept():
            import boto3
            import botocore.exceptions
            from botocore.config import Config
    except ImportError as exc:
        raise UsageError(
            "boto3 is not installed", hint="pip install 'ckptrescue[s3]'"
        ) from exc

    when = "when_supported" if options.checksum_when == "supported" else "when_required"
    custom = options.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get(
        "AWS_ENDPOINT_URL")
    config = Config(
        s3={"addressing_style": "path" if custom else "auto"},
        request_checksum_calculation=when,
        response_checksum_validation=when,
        max_pool_connections=max(options.max_pool_connections, 1),
        connect_timeout=options.connect_timeout,
        read_timeout=options.read_timeout,
        retries={"max_attempts": options.max_attempts, "mode": "standard"},
    )
    try:
        # the first client imports botocore's client modules and parses its data files (kept
        # for the process, as imports are)
        with imports_kept():
            core, loader = _botocore_session(options.profile)
            session = boto3.session.Session(profile_name=options.profile, botocore_session=core)
            _drop_repeated_paths(loader)
            client = session.client(
                "s3", endpoint_url=options.endpoint_url, region_name=options.region,
                config=config)
    except botocore.exceptions.ProfileNotFound as exc:
        raise UsageError(f"AWS profile not found: {options.profile}") from exc
    except ValueError as exc:  # e.g. a malformed endpoint URL
        raise UsageError(f"cannot create an S3 client: {exc}") from exc
    stats = ClientStats()
    client._ckptrescue_stats = stats

    def _guard(params: Any = None, model: Any = None, **_: Any) -> None:
        name = getattr(model, "name", "?")
        if name not in READ_OPERATIONS:
            raise RefusedError(
                f"refused S3 operation {name}: ckptrescue never writes to a bucket "
                "(read-only client)"
            )
        stats.count(name)

    client.meta.events.register("before-parameter-build.s3", _guard, unique_id="ckptrescue-ro")
    return client


# botocore's data files (the S3 model, its endpoint rules, the partitions: about 1 MB of JSON)
# as parsed, one loader per data path for the process: a session of its own per client keeps
# profiles and credentials apart, but parsing them again cost about 0.1 CPU-s a client (a
# dataset verify makes one per batch of objects). botocore shares a session's loader between
# its clients and threads in the same way (what it writes into the parsed data later is the
# same values each time).
_loaders: dict[str | None, Any] = {}
_loaders_lock = threading.Lock()
_S3_MODELS = ("service-2", "endpoint-rule-set-1")
_DATA_FILES = ("endpoints", "partitions", "sdk-default-configuration")


def _new_lock_in_child() -> None:
    global _loaders_lock
    _loaders_lock = threading.Lock()  # a fork while another thread held it: never released


os.register_at_fork(after_in_child=_new_lock_in_child)


def _botocore_session(profile: str | None) -> tuple[Any, Any]:
    """A new botocore session (raises ProfileNotFound) that parses no data file again, and
    its loader."""
    import botocore.loaders
    import botocore.session

    session = botocore.session.get_session()
    if profile is not None:
        session.set_config_variable("profile", profile)
    data_path = session.get_config_variable("data_path")  # AWS_DATA_PATH, the profile's
    with _loaders_lock:
        loader = _loaders.get(data_path)
        if loader is None:
            loader = _loaders[data_path] = botocore.loaders.create_loader(data_path)
            # parsed here, once: the first clients of a verify are made at once, on threads
            try:
                for name in _S3_MODELS:
                    loader.load_service_model("s3", name, api_version=None)  # as botocore asks
                for name in _DATA_FILES:
                    loader.load_data(name)
            except Exception:  # noqa: BLE001, S110 - the client's creation says what is wrong
                pass
    session.register_component("data_loader", loader)
    return session, loader


def _drop_repeated_paths(loader: Any) -> None:
    """boto3 appends its own data directory to the loader's search paths for each session:
    keep the first (the repeats are at the end, behind the copies searched first)."""
    with _loaders_lock:
        paths = loader.search_paths
        while len(paths) > 1 and paths[-1] in paths[:-1]:
            paths.pop()


def stats(client: Any) -> ClientStats:
    """Operation counts and bytes downloaded for a client made by :func:`make_client`."""
    found = getattr(client, "_ckptrescue_stats", None)
    if not isinstance(found, ClientStats):
        raise TypeError("not a client made by ckptrescue.stores.s3.client.make_client")
    return found


def error_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None


def http_status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return int(status) if status is not None else None
    return None


def is_access_denied(exc: BaseException) -> bool:
    return error_code(exc) in {"AccessDenied", "403", "Forbidden", "AllAccessDisabled"} or (
        http_status(exc) == 403
    )


def is_not_found(exc: BaseException) -> bool:
    return error_code(exc) in {"404", "NoSuchKey", "NotFound", "NoSuchVersion"} or (
        http_status(exc) == 404 and error_code(exc) != "NoSuchBucket"
    )


def translate_error(exc: BaseException, what: str) -> CkptRescueError:
    """A one-line kit error for a botocore failure while doing ``what`` (e.g. 's3://b/k')."""
    if isinstance(exc, CkptRescueError):
        return exc
    import botocore.exceptions as bx

    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
        return UsageError(
            f"{what}: no AWS credentials found",
            hint="set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or --profile",
        )
    if isinstance(exc, bx.ProfileNotFound):
        return UsageError(f"{what}: {exc}")
    if isinstance(exc, bx.EndpointConnectionError | bx.ConnectTimeoutError):
        return RemoteError(
            f"{what}: cannot reach the S3 endpoint ({exc})",
            hint="check --endpoint-url / AWS_ENDPOINT_URL and the network",
        )
    if isinstance(exc, bx.ReadTimeoutError | bx.ConnectionClosedError):
        return RemoteError(f"{what}: the S3 endpoint stopped answering ({exc})")
    if isinstance(exc, bx.ClientError):
        code = error_code(exc) or "?"
        if code == "NoSuchBucket":
            return UsageError(f"{what}: bucket does not exist")
        if is_access_denied(exc):
            return RemoteError(f"{what}: access denied ({code})",
                               hint="check the principal's s3:Get*/s3:List* permissions")
        if code in {"InvalidAccessKeyId", "SignatureDoesNotMatch"}:
            return UsageError(f"{what}: credentials rejected ({code})")
        message = exc.response.get("Error", {}).get("Message", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        http = f" (HTTP {status})" if status else ""
        return RemoteError(f"{what}: S3 error {code}{http}: {message}".rstrip(": "))
    if isinstance(exc, bx.BotoCoreError):
        return RemoteError(f"{what}: {exc}")
    return RemoteError(f"{what}: {type(exc).__name__}: {exc}")
