"""Check the built wheel carries what issue 16 asks of the package metadata.

Run by ``make dist`` after ``python -m build``: the wheel must ship ``py.typed``, name its
papers under Project-URL, carry the Typing classifier, and keep plotting out of the core
requirements (matplotlib only behind the ``plot`` extra).
"""

import glob
import sys
import zipfile
from email.parser import Parser


def problems(wheel: str) -> list[str]:
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
    metadata = Parser().parsestr(archive.read(metadata_name).decode())
    found = []
    if "renyiboost/py.typed" not in names:
        found.append("py.typed missing from the wheel")
    if not any("arxiv.org/abs/2309.12041" in url for url in metadata.get_all("Project-URL", [])):
        found.append("no Project-URL for the S-BDT paper")
    if "Typing :: Typed" not in metadata.get_all("Classifier", []):
        found.append("the Typing :: Typed classifier is missing")
    core = [r for r in metadata.get_all("Requires-Dist", []) if "extra ==" not in r]
    if any(r.startswith("matplotlib") for r in core):
        found.append("matplotlib is a core requirement; it belongs in the plot extra")
    return found


if __name__ == "__main__":
    wheels = glob.glob("dist/*.whl")
    if len(wheels) != 1:
        sys.exit(f"expected one wheel in dist/, found {len(wheels)}")
    found = problems(wheels[0])
    sys.exit("; ".join(found) if found else 0)
