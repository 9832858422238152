#!/usr/bin/env bash
# Fetches plotly.js's "basic" partial bundle (scatter, bar, pie: every trace type the report
# draws) from the npm registry, checks it against the pinned npm integrity hash, writes it to OUT.
# Why not plotly.py's own bundle: that one carries every trace type, 4.8 MB of a 4.9 MB report;
# the basic one is 1.2 MB, so a report stays small enough to mail.
#   scripts/fetch_plotly_basic.sh OUT
set -euo pipefail
out=$1
version=4.1.1
integrity=1oNF8PeQx2hv/y7tqEVWKD3JGwn/MGEMQ8mL9HUwsaqG9FGy/OU5FHUHvzqbqxN4mnwZGI9abTiE775C4kkjMQ==
url="https://registry.npmjs.org/plotly.js-basic-dist-min/-/plotly.js-basic-dist-min-$version.tgz"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
curl -fsSL --retry 3 -o "$work/bundle.tgz" "$url" || { echo "fetch_plotly_basic: cannot download $url" >&2; exit 1; }
actual=$(openssl dgst -sha512 -binary "$work/bundle.tgz" | base64 -w0)
if [[ $actual != "$integrity" ]]; then
  echo "fetch_plotly_basic: $url does not match the pinned sha512 (got $actual)" >&2
  exit 1
fi
tar -xzmf "$work/bundle.tgz" -C "$work" package/plotly-basic.min.js  # -m: dated now, for make
mkdir -p "$(dirname "$out")"
mv "$work/package/plotly-basic.min.js" "$out"
