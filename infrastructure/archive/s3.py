"""Archive files in an S3-compatible bucket (AWS S3, MinIO, Ceph, Garage…), through boto3.

``s3://bucket/prefix?endpoint=https://minio.internal:9000&region=eu-west-1``:
credentials are boto3's own (``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``,
a profile, an instance role). An object is written in one request (or a
multipart upload that completes or leaves nothing), so a reader never sees
half of one; each is sent with its SHA-256 for the store to check.
"""

from __future__ import annotations

import base64
import hashlib
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs

from .store import Store, StoreError


class S3Store(Store):
    def __init__(self, bucket: str, prefix: str, query: str = ""):
        import boto3
        from botocore.config import Config

        options = {key: values[-1] for key, values in parse_qs(query).items()}
        unknown = set(options) - {"endpoint", "region"}
        if unknown:
            raise StoreError(f"s3://{bucket}: unknown option(s) {', '.join(sorted(unknown))}")
        self.bucket, self.prefix = bucket, prefix
        self.location = f"s3://{bucket}/{prefix}".rstrip("/")
        self.client = boto3.client(
            "s3",
            endpoint_url=options.get("endpoint"),
            region_name=options.get("region"),
            config=Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=10),
        )

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def read_bytes(self, name: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(name))["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None
        except Exception as error:  # botocore's errors: unreachable, refused, no bucket
            raise StoreError(f"{self.location}/{name} cannot be read: {error}") from None

    def write_bytes(self, name: str, data: bytes) -> None:
        digest = base64.b64encode(hashlib.sha256(data).digest()).decode()
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self._key(name), Body=data, ChecksumSHA256=digest
            )
        except Exception as error:
            raise StoreError(f"{self.location}/{name} cannot be written: {error}") from None

    def put(self, name: str, source: Path) -> None:
        try:
            self.client.upload_file(
                str(source), self.bucket, self._key(name), ExtraArgs={"ChecksumAlgorithm": "SHA256"}
            )
        except Exception as error:
            raise StoreError(f"{self.location}/{name} cannot be written: {error}") from None

    @contextmanager
    def local(self, name: str) -> Iterator[Path | None]:
        with tempfile.TemporaryDirectory(prefix="airlock-archive-") as scratch:
            path = Path(scratch) / Path(name).name
            try:
                self.client.download_file(self.bucket, self._key(name), str(path))
            except Exception as error:
                if getattr(error, "response", {}).get("Error", {}).get("Code") in (
                    "404",
                    "NoSuchKey",
                ):
                    yield None
                    return
                raise StoreError(f"{self.location}/{name} cannot be read: {error}") from None
            yield path
