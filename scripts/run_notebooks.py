"""Execute every notebook in notebooks/ headless with nbclient; the notebooks export their plots.

With a CUDA GPU each notebook runs for real and is saved in place with its outputs, and its
tables and figures land in results/<model>/. Without a GPU each runs in its no-GPU mode into a
temporary copy (the committed GPU outputs stay untouched) and plots the committed results.

    python scripts/run_notebooks.py [notebooks/01_....ipynb ...] [--timeout SECONDS]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import helpers  # noqa: E402


def execute(path: Path, save_to: Path, timeout: int) -> float:
    """Run ``path`` top to bottom in its own folder; write the executed notebook to ``save_to``."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(nb, save_to)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    args = parser.parse_args()
    notebooks = [p.resolve() for p in args.notebooks] or sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    gpu = helpers.gpu_available()
    print("GPU:", helpers.environment_report()["gpu"])
    with tempfile.TemporaryDirectory() as tmp:
        for path in notebooks:
            target = path if gpu else Path(tmp) / path.name
            seconds = execute(path, target, args.timeout)
            where = "saved in place" if gpu else "no-GPU mode, committed outputs left as they are"
            print(f"executed {path.relative_to(ROOT)} in {seconds:.1f} s ({where})")
    if gpu:
        print("figures and tables: results/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
