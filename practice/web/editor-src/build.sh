#!/usr/bin/env bash
# Rebuild practice/web/editor.js (only when changing the editor; learners never need this).
# Needs node and npm; works in a scratch folder outside the repository, so no node_modules lands here.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
SCRATCH="${1:-/tmp/web-cm}"
mkdir -p "$SCRATCH" && cd "$SCRATCH"
[ -f package.json ] || npm init -y > /dev/null
npm install --no-audit --no-fund \
  @codemirror/state@6.7.6 @codemirror/view@6.43.15 @codemirror/commands@6.11.1 \
  @codemirror/language@6.13.1 @codemirror/lang-python@6.2.1 esbuild@0.28.2
cp "$HERE/entry.js" "$SCRATCH/entry.js"
npx esbuild entry.js --bundle --minify --format=iife --legal-comments=eof --outfile="$HERE/../editor.js"
