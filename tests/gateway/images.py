"""The suite's upstream MCP server as a container image, built here without a registry.

``upstream_image()`` builds ``airlock-test-upstream:<hash>`` on the sandbox image:
the official MCP SDK and what it needs, copied from this venv (the image's
Debian Python is the same 3.11), and ``tests/gateway/upstream.py``. The tag is a
hash of what went in, so an unchanged image is reused.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from packaging.requirements import Requirement

HERE = Path(__file__).resolve().parent
NAME = "airlock-test-upstream"
SITE = "/opt/upstream/site"
COMMAND = ["python3", "/opt/upstream/upstream.py", "stdio"]


def _closure(
    name: str, found: dict[str, metadata.Distribution], extras: frozenset[str] = frozenset()
) -> None:
    """``name``'s distribution and every one it requires, with the extras asked for."""
    key = name.lower().replace("_", "-")
    asked = {f"{key}[{extra}]" for extra in extras} | {key}
    if asked <= found.keys():
        return
    distribution = metadata.distribution(name)
    found.update(dict.fromkeys(asked, distribution))
    for line in distribution.requires or []:
        requirement = Requirement(line)
        if requirement.marker is None or any(
            requirement.marker.evaluate({"extra": extra}) for extra in ("", *extras)
        ):
            _closure(requirement.name, found, frozenset(requirement.extras))


def _sandbox_image_id(base: str) -> str:
    return subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", base],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def upstream_image(base: str = "airlock-sandbox:latest") -> str:
    """The image's tag, built first when it is not on the engine."""
    found: dict[str, metadata.Distribution] = {}
    _closure("mcp", found)
    digest = hashlib.sha256(_sandbox_image_id(base).encode())
    digest.update((HERE / "upstream.py").read_bytes())
    for key in sorted(found):
        digest.update(f"{key}=={found[key].version}".encode())
    tag = f"{NAME}:{digest.hexdigest()[:16]}"
    present = subprocess.run(["docker", "image", "inspect", tag], capture_output=True)
    if present.returncode == 0:
        return tag
    context = Path(tempfile.mkdtemp(prefix="airlock-upstream-image-"))
    try:
        for distribution in {id(d): d for d in found.values()}.values():
            for file in distribution.files or []:
                if str(file).startswith("..") or file.suffix == ".pyc":
                    continue
                target = context / "site" / file
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(distribution.locate_file(file), target)
        shutil.copyfile(HERE / "upstream.py", context / "upstream.py")
        (context / "Dockerfile").write_text(
            f"FROM {base}\n"
            f"COPY site {SITE}\n"
            "COPY upstream.py /opt/upstream/upstream.py\n"
            f"ENV PYTHONPATH={SITE}\n"
            f"CMD {COMMAND!r}\n".replace("'", '"')
        )
        subprocess.run(
            ["docker", "build", "--quiet", "-t", tag, str(context)],
            env={**os.environ, "DOCKER_BUILDKIT": "0"},
            check=True, capture_output=True,
        )  # fmt: skip
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return tag
