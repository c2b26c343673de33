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


README_START, README_END = "<!-- results:start -->", "<!-- results:end -->"


def readme_results() -> str:
    """A Markdown table of every results/<model>/timing.csv (median ms, speedups), with its stamp."""
    import pandas as pd

    blocks = []
    for folder in sorted(p for p in helpers.RESULTS_DIR.iterdir() if (p / "timing.csv").exists()):
        res = helpers.load_results(folder.name)
        t = res["timing"].rename(index=str.strip)
        table = pd.DataFrame({"median (ms)": t["median_ms"].map("{:.4f}".format),
                              "p10-p90 (ms)": [f"{a:.4f}-{b:.4f}" for a, b in zip(t["p10_ms"], t["p90_ms"])],
                              "vs eager": [("-" if name.startswith("part:") else f"{t.loc['eager', 'median_ms'] / v:.2f}x")
                                           for name, v in t["median_ms"].items()]},
                             index=t.index)
        blocks.append(f"**{folder.name}** - {helpers.stamp(res['env'])}\n\n{table.to_markdown()}")
    return "\n\n".join(blocks)


def update_readme() -> None:
    """Rewrite the README's results section (between the markers) from results/."""
    readme = ROOT / "README.md"
    text = readme.read_text()
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    readme.write_text(f"{head}{README_START}\n{readme_results()}\n{README_END}{tail}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    parser.add_argument("--readme-only", action="store_true",
                        help="only rewrite the README's results table from results/")
    args = parser.parse_args()
    if args.readme_only:
        update_readme()
        return 0
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
        update_readme()
        print("figures and tables: results/; README results table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
