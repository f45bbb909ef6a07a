"""A copy of a homeagent wheel with a local version added (0.1.0 ->
0.1.0+vm1), for the VM's upgrade check: the same code, but a newer
version that pip installs over the old one and `status` reports.

    python bump_wheel.py WHEEL LOCAL OUTDIR    prints the new wheel's path
"""

from __future__ import annotations

import base64
import hashlib
import os
import sys
import zipfile


def main() -> int:
    wheel, local, outdir = sys.argv[1:4]
    name, version, rest = os.path.basename(wheel).split("-", 2)
    new = f"{version}+{local}"
    old_info, new_info = f"{name}-{version}.dist-info/", f"{name}-{new}.dist-info/"
    target = os.path.join(outdir, f"{name}-{new}-{rest}")
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(wheel) as source:
        for item in source.namelist():
            data = source.read(item)
            if item == "agent/__init__.py":
                data = data.replace(f'__version__ = "{version}"'.encode(),
                                    f'__version__ = "{new}"'.encode())
            elif item == old_info + "METADATA":
                data = data.replace(f"\nVersion: {version}\n".encode(),
                                    f"\nVersion: {new}\n".encode())
            files[item.replace(old_info, new_info)] = data
    record = new_info + "RECORD"
    lines = []
    for item, data in files.items():
        if item != record:
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            lines.append(f"{item},sha256={digest.decode()},{len(data)}")
    files[record] = ("\n".join(lines + [f"{record},,"]) + "\n").encode()
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for item, data in files.items():
            out.writestr(item, data)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
