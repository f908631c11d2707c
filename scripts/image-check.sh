#!/usr/bin/env bash
# Build the Containerfile's image here without a container daemon and check it from inside (cluster-env item 3):
# buildah (Debian's package) with chroot isolation, on a Debian bookworm base made locally with debootstrap that
# stands for the official image; then, in the image: the import check, `snakemake -n` of the demo and of the
# paper config, and a short part of the unit tests. Run it whenever the Containerfile or a pin changes (13.6
# minutes measured here on 2026-12-06, 2 cores: most of it pip downloading torch's CUDA wheels and buildah copying
# them; a 7.8 GB image; not in CI).
#   bash scripts/image-check.sh              (root; apt-get installs buildah and debootstrap when absent)
# Environment: SITE_CA (a CA bundle for pip at build time, default the machine's; never stored in the image),
#              IMAGE (default localhost/clmdetour:check), WORK (default /tmp/clmdetour-image).
# No --layers: with the vfs storage driver every cached layer is a full copy (the torch layer is several GB);
# a cached build filled the disk here.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-localhost/clmdetour:check}
WORK=${WORK:-/tmp/clmdetour-image}
SITE_CA=${SITE_CA:-/etc/ssl/certs/ca-certificates.crt}
B=(buildah --storage-driver vfs)
t0=$(date +%s)
step() { echo "=== image-check: $1 ($(( $(date +%s) - t0 )) s)"; }
if ! command -v buildah >/dev/null || ! command -v debootstrap >/dev/null; then
  step "installing buildah and debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q buildah debootstrap >/dev/null
fi
mkdir -p "$WORK"
if ! "${B[@]}" inspect localhost/debian:bookworm >/dev/null 2>&1; then
  step "a Debian bookworm base with debootstrap (stands for debian:bookworm)"
  rm -rf "$WORK/rootfs" && debootstrap --variant=minbase bookworm "$WORK/rootfs" http://deb.debian.org/debian >/dev/null
  tar -C "$WORK/rootfs" -cf "$WORK/rootfs.tar" .
  printf 'FROM scratch\nADD rootfs.tar /\nCMD ["/bin/bash"]\n' > "$WORK/Base.Containerfile"
  "${B[@]}" bud --isolation chroot -q -f "$WORK/Base.Containerfile" -t localhost/debian:bookworm "$WORK" >/dev/null
fi
step "building $IMAGE from the committed tree (git archive HEAD)"
rm -rf "$WORK/ctx" && mkdir -p "$WORK/ctx" && git archive HEAD | tar -x -C "$WORK/ctx"
"${B[@]}" bud --isolation chroot --build-arg BASE_IMAGE=localhost/debian:bookworm \
  --secret "id=site_ca,src=$SITE_CA" -f "$WORK/ctx/Containerfile" -t "$IMAGE" "$WORK/ctx" > "$WORK/build.log" 2>&1 \
  || { tail -30 "$WORK/build.log"; exit 1; }
grep "^installed:" "$WORK/build.log" || true
ctr=$("${B[@]}" from "$IMAGE")
trap '"${B[@]}" rm "$ctr" >/dev/null' EXIT
run() { "${B[@]}" run --isolation chroot --workingdir /opt/clmdetour "$ctr" -- "$@"; }
step "inside: user, CA not stored, import check"
run sh -c 'id -un; test ! -e /run/secrets/site_ca && echo "no CA bundle in the image"'
run python -c "import torch, transformers, composer, snakemake, clmdetour; print('import check: torch', torch.__version__, 'transformers', transformers.__version__, 'composer', composer.__version__)"
step "inside: snakemake -n of the demo and of the paper config"
run sh -c 'cd /tmp && cp -r /opt/clmdetour w && cd w && snakemake --profile profiles/local -n | tail -1 && snakemake --cores 1 -n all | tail -1'
step "inside: a short part of the unit tests"
run sh -c 'cd /tmp && cp -r /opt/clmdetour t && cd t && python -m pytest -q -p no:cacheprovider tests/test_config.py tests/test_settings.py tests/test_driver.py tests/test_environment.py tests/test_stats.py 2>&1 | tail -2'
step "done"
