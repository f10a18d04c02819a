#!/usr/bin/env bash
# Checks the wheel-building configuration without building anything (no Docker, no macOS needed):
#   - cibuildwheel --print-build-identifiers for linux, macos and windows (from pyproject.toml);
#   - [tool.cibuildwheel] against cibuildwheel's own JSON schema;
#   - .github/workflows/*.yml against the GitHub workflow schema (check-jsonschema, vendored).
# Needs PyPI for its tools (a venv in build/ci-config-tools, reused).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
CIBUILDWHEEL_VERSION="$(sed -n 's/^ *CIBUILDWHEEL_VERSION: *"\(.*\)"/\1/p' .github/workflows/wheels.yml)"
TOOLS="build/ci-config-tools"

if ! "$TOOLS/bin/python" -c 'import cibuildwheel, check_jsonschema' 2>/dev/null; then
  rm -rf "$TOOLS"
  "$PYTHON" -m venv "$TOOLS"
  "$TOOLS/bin/python" -m pip install -q "cibuildwheel==${CIBUILDWHEEL_VERSION}" check-jsonschema
fi

for platform in linux macos windows; do
  echo "== cibuildwheel ${CIBUILDWHEEL_VERSION} --print-build-identifiers --platform $platform"
  ids="$("$TOOLS/bin/cibuildwheel" --print-build-identifiers --platform "$platform" .)"
  echo "${ids:-(none: not a target, see docs/internals/wheels.md)}"
done

echo "== [tool.cibuildwheel] against cibuildwheel's schema"
"$TOOLS/bin/python" - <<'EOF'
import json, pathlib, tomllib
import cibuildwheel, jsonschema
schema = json.loads((pathlib.Path(cibuildwheel.__file__).parent / "resources" / "cibuildwheel.schema.json").read_text())
config = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["tool"]["cibuildwheel"]
jsonschema.validate(config, schema)
print("ok -- [tool.cibuildwheel] is valid")
EOF

echo "== workflows against the GitHub workflow schema"
"$TOOLS/bin/check-jsonschema" --builtin-schema vendor.github-workflows .github/workflows/*.yml
