"""Fail when pytest skipped a test that is not on the commented allowlist."""

import sys
import xml.etree.ElementTree as ET

junit, allowlist = sys.argv[1], sys.argv[2]
allowed = {
    line.split("#")[0].strip()
    for line in open(allowlist, encoding="utf-8")
    if line.split("#")[0].strip()
}
skipped = []
for case in ET.parse(junit).iter("testcase"):
    if case.find("skipped") is not None:
        node = f"{case.get('classname')}::{case.get('name')}"
        if node not in allowed:
            skipped.append(f"{node}: {case.find('skipped').get('message')}")
if skipped:
    print("Skipped tests not on the allowlist:\n  " + "\n  ".join(skipped))
    sys.exit(1)
print("no unexpected skips")
