# A Debian root filesystem made by debootstrap, without a registry; sourced by
# docker/sandbox/build and docker/offline/build.
#
# debootstrap a minimal bookworm (python3, bash, nodejs, and the sandbox's
# non-root user) from the mirror configured under /etc/apt/sources.list.d,
# keep the tarball in $AIRLOCK_CACHE, and import it as an image named by a hash
# of what went into it. Every offline image starts from this one root: the
# sandbox image, and the Python, PostgreSQL, Redis and proxy images of the
# scale deployment.
#
# The caller defines say() and die() and may append paths to CLEANUP.

AIRLOCK_CACHE=${AIRLOCK_CACHE:-/var/cache/airlock}
DEBIAN_SUITE=bookworm
DEBIAN_PACKAGES=python3-minimal,python3,bash,nodejs
SANDBOX_UID=10001

image_label() {
    docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true
}

debian_mirror() {
    # The main (non-security) archive serving $DEBIAN_SUITE, from deb822 or one-line sources.
    python3 - "$DEBIAN_SUITE" <<'PY'
import glob, sys

suite = sys.argv[1]
files = sorted(glob.glob("/etc/apt/sources.list.d/*.sources"))
files += sorted(glob.glob("/etc/apt/sources.list.d/*.list")) + ["/etc/apt/sources.list"]
for path in files:
    try:
        text = open(path).read()
    except OSError:
        continue
    if path.endswith(".sources"):
        for para in text.split("\n\n"):
            fields = {}
            for line in para.splitlines():
                if ":" in line and not line.startswith(("#", " ")):
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.split()
            if "deb" in fields.get("types", []) and suite in fields.get("suites", []):
                for uri in fields.get("uris", []):
                    print(uri)
                    sys.exit(0)
    else:
        for line in text.splitlines():
            parts = line.split("#")[0].split()
            if parts[:1] == ["deb"]:
                rest = [p for p in parts[1:] if not p.startswith("[")]
                if len(rest) >= 2 and rest[1] == suite:
                    print(rest[0])
                    sys.exit(0)
sys.exit(1)
PY
}

make_rootfs_tarball() {
    local tarball=$1 mirror=$2 rootfs
    command -v debootstrap >/dev/null || die "debootstrap not found (scripts/provision image)"
    rootfs=$(mktemp -d /var/tmp/airlock-rootfs.XXXXXX)
    CLEANUP+=("$rootfs")
    say "debootstrap $DEBIAN_SUITE from $mirror (about a minute)"
    debootstrap --variant=minbase --include="$DEBIAN_PACKAGES" "$DEBIAN_SUITE" "$rootfs" "$mirror" \
        >"$AIRLOCK_CACHE/debootstrap.log" 2>&1 ||
        die "debootstrap failed (log: $AIRLOCK_CACHE/debootstrap.log)"
    # The sandbox user: no shell, no password, home on the per-run tmpfs.
    echo "sandbox:x:$SANDBOX_UID:$SANDBOX_UID:Airlock sandbox:/work:/usr/sbin/nologin" >>"$rootfs/etc/passwd"
    echo "sandbox:x:$SANDBOX_UID:" >>"$rootfs/etc/group"
    mkdir -p "$rootfs/work" "$rootfs/opt/airlock"
    # Nothing here is needed at run time and it halves the image.
    rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* \
        "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
    say "writing $tarball"
    tar --numeric-owner -C "$rootfs" -cf "$tarball.partial" . || die "could not write $tarball"
    mv "$tarball.partial" "$tarball"
}

# Set DEBIAN_ROOT_IMAGE to the imported Debian root, importing (and
# debootstrapping) it first when it is missing.
ensure_debian_root() {
    local mirror key tarball
    mirror=$(debian_mirror) || die "no Debian $DEBIAN_SUITE mirror found under /etc/apt/sources.list.d"
    key=$(printf '%s %s %s %s' "$DEBIAN_SUITE" "$DEBIAN_PACKAGES" "$mirror" "$SANDBOX_UID" |
        sha256sum | cut -c1-16)
    DEBIAN_ROOT_IMAGE="airlock-sandbox-base:$key"
    tarball="$AIRLOCK_CACHE/sandbox-rootfs-$key.tar"
    if docker image inspect "$DEBIAN_ROOT_IMAGE" >/dev/null 2>&1; then
        say "base image $DEBIAN_ROOT_IMAGE present"
        return
    fi
    mkdir -p "$AIRLOCK_CACHE"
    [[ -s $tarball ]] || make_rootfs_tarball "$tarball" "$mirror"
    say "importing $tarball as $DEBIAN_ROOT_IMAGE"
    docker import "$tarball" "$DEBIAN_ROOT_IMAGE" >/dev/null || die "docker import failed"
}
