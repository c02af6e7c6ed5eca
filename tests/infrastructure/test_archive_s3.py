"""The archive in an S3-compatible bucket: an S3 server process on a local port (moto's server:
the S3 HTTP API, no cloud account), written and read back through boto3 as in production."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from datetime import UTC, timedelta

import pytest
from django.core.management import CommandError, call_command

from approvals.retention import passes
from audit import archive as audit_archive
from executions.models import Execution, OutputChunk
from infrastructure.archive import Archive
from infrastructure.archive.store import StoreError
from tests.approvals.test_retention import NOW, audit_history

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def s3_server():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    else:
        server.kill()
        raise RuntimeError("the S3 server did not start")
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(10)


@pytest.fixture
def bucket(s3_server, monkeypatch, settings):
    import boto3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "airlock-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "airlock-test-secret")
    name = f"airlock-{time.monotonic_ns()}"
    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket=name)
    settings.RETENTION_ARCHIVE = f"s3://{name}/prod?endpoint={s3_server}&region=us-east-1"
    return name


def test_output_and_audit_records_archive_to_a_bucket_and_verify_from_it(bucket, s3_server, capsys):
    import boto3

    execution = Execution.objects.create(
        action="script.execute", command_hash="0" * 64, status="succeeded",
        finished_at=NOW - timedelta(days=40),
    )  # fmt: skip
    OutputChunk.objects.create(execution=execution, seq=1, stream="stdout", data="from s3\n")
    audit_history()
    archive = Archive(f"s3://{bucket}/prod?endpoint={s3_server}&region=us-east-1")

    passes.run(passes.Keep(output=30, proposals=None, audit=2), archive, now=NOW)

    keys = {
        item["Key"]
        for item in boto3.client(
            "s3", endpoint_url=s3_server, region_name="us-east-1"
        ).list_objects_v2(Bucket=bucket)["Contents"]
    }
    day = (NOW - timedelta(days=40)).astimezone(UTC).date()
    assert f"prod/output/{day}.jsonl.gz" in keys and "prod/manifest.json" in keys
    assert any(key.startswith("prod/audit/") for key in keys)
    call_command("retention", "--output", str(execution.pk))
    assert capsys.readouterr().out == "from s3\n"
    call_command("verify_audit", "--archive")
    assert "archived rows intact" in capsys.readouterr().out
    call_command("retention", "--check")
    assert "archive intact" in capsys.readouterr().out

    # A file changed in the bucket behind the manifest's back is named, not read.
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    client.put_object(Bucket=bucket, Key=f"prod/output/{day}.jsonl.gz", Body=b"not gzip")
    with pytest.raises(CommandError, match="does not match its checksum"):
        call_command("retention", "--check")
    assert audit_archive.verify_archived(archive).ok  # the audit files are untouched


def test_an_unreachable_or_misnamed_bucket_is_a_clear_error(s3_server, monkeypatch, settings):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "airlock-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "airlock-test-secret")
    settings.RETENTION_ARCHIVE = f"s3://no-such-bucket/x?endpoint={s3_server}&region=us-east-1"
    with pytest.raises(CommandError, match="no-such-bucket.*cannot be"):
        call_command("retention", "--check")
    with pytest.raises(StoreError, match="unknown option"):
        Archive("s3://b/x?endpiont=http://x")
    with pytest.raises(StoreError, match="a directory or an s3:// bucket"):
        Archive("ftp://host/x")
