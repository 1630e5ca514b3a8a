#!/usr/bin/env python3
"""Writes the hwloc 2.x XML fixtures of test/unit/test_topology.cc.

Each box is described below in a few lines; this script turns it into the
XML that hwloc 2.x exports (`lstopo --of xml --whole-io`): packages with a
NUMA node and cores, PCI host bridges, PCIe switches (bridge chains), GPUs
(class 0302, NVIDIA H100/H200 ids), NVSwitches (class 0680), and -- where
the box is meant to look like hwloc built with its NVML component -- the
`nvmlN` OS devices and the `NVLinkBandwidth` matrix (MB/s per direction,
1000000 on the diagonal, as hwloc writes it).

Run from the repository root, then check each file loads:
    python3 test/data/make_fixtures.py
    for f in test/data/*.xml; do lstopo-no-graphics --input "$f" --whole-io >/dev/null; done
"""
import os

GPU_TYPE = "0302 [10de:2335] [10de:18be] a1"       # H200 SXM
NVSWITCH_TYPE = "0680 [10de:22a3] [10de:1796] a1"  # NVSwitch (gen 3)
NIC_TYPE = "0200 [15b3:1021] [15b3:0023] 00"       # ConnectX-7
ROOT_PORT_TYPE = "0604 [8086:352a] [0000:0000] 04"
SWITCH_PORT_TYPE = "0604 [1000:c030] [1000:100b] 00"
DIAGONAL = 1000000


class Box:
    def __init__(self, cores_per_package, packages):
        self.gp = 0
        self.cores = cores_per_package
        self.packages = packages
        self.io = {p: [] for p in range(packages)}  # host bridges per package
        self.osdevs = []  # (name, gp) of nvml OS devices, in GPU order
        self.switches = []  # gp of NVSwitch PCI devices
        self.matrix = None

    def next_gp(self):
        self.gp += 1
        return self.gp

    def host_bridge(self, package, domain_bus_range, children):
        self.io[package].append(("host", domain_bus_range, children))


def cpuset(first, count):
    return "0x%08x" % (((1 << count) - 1) << first)


def pci_dev(busid, pci_type, osdev=None):
    return ("pci", busid, pci_type, osdev)


def bridge(busid, bus_range, children, pci_type=SWITCH_PORT_TYPE):
    return ("bridge", busid, bus_range, pci_type, children)


def render(box, name):
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
           '<topology version="2.0">']
    total = box.cores * box.packages
    nodes = "0x%08x" % ((1 << box.packages) - 1)
    out.append('  <object type="Machine" os_index="0" cpuset="%s" complete_cpuset="%s" allowed_cpuset="%s" '
               'nodeset="%s" complete_nodeset="%s" allowed_nodeset="%s" gp_index="%d">'
               % (cpuset(0, total), cpuset(0, total), cpuset(0, total), nodes, nodes, nodes, box.next_gp()))
    out.append('    <info name="Backend" value="Linux"/>')
    out.append('    <info name="Fixture" value="%s (nccl-dcp test/data/make_fixtures.py)"/>' % name)

    def emit_io(node, indent, depth):
        pad = " " * indent
        if node[0] == "pci":
            _, busid, pci_type, osdev = node
            gp = box.next_gp()
            if pci_type == NVSWITCH_TYPE:
                box.switches.append(gp)
            line = '%s<object type="PCIDev" gp_index="%d" pci_busid="%s" pci_type="%s" pci_link_speed="63.015385"' % (
                pad, gp, busid, pci_type)
            if pci_type == NVSWITCH_TYPE and box.matrix is not None:
                line += ' subtype="NVSwitch"'
            if osdev is None:
                out.append(line + "/>")
                return
            out.append(line + ">")
            ogp = box.next_gp()
            box.osdevs.append((osdev, ogp))
            out.append('%s  <object type="OSDev" gp_index="%d" name="%s" subtype="NVML" osdev_type="1">' % (pad, ogp, osdev))
            out.append('%s    <info name="GPUVendor" value="NVIDIA Corporation"/>' % pad)
            out.append('%s    <info name="GPUModel" value="NVIDIA H200"/>' % pad)
            out.append('%s  </object>' % pad)
            out.append("%s</object>" % pad)
        else:
            _, busid, bus_range, pci_type, children = node
            out.append('%s<object type="Bridge" gp_index="%d" bridge_type="1-1" depth="%d" bridge_pci="%s" '
                       'pci_busid="%s" pci_type="%s" pci_link_speed="63.015385">'
                       % (pad, box.next_gp(), depth, bus_range, busid, pci_type))
            for c in children:
                emit_io(c, indent + 2, depth + 1)
            out.append("%s</object>" % pad)

    for p in range(box.packages):
        first = p * box.cores
        cs = cpuset(first, box.cores)
        ns = "0x%08x" % (1 << p)
        out.append('    <object type="Package" os_index="%d" cpuset="%s" complete_cpuset="%s" nodeset="%s" '
                   'complete_nodeset="%s" gp_index="%d">' % (p, cs, cs, ns, ns, box.next_gp()))
        out.append('      <object type="NUMANode" os_index="%d" cpuset="%s" complete_cpuset="%s" nodeset="%s" '
                   'complete_nodeset="%s" gp_index="%d" local_memory="68719476736"/>' % (p, cs, cs, ns, ns, box.next_gp()))
        for c in range(box.cores):
            cc = cpuset(first + c, 1)
            out.append('      <object type="Core" os_index="%d" cpuset="%s" complete_cpuset="%s" nodeset="%s" '
                       'complete_nodeset="%s" gp_index="%d">' % (first + c, cc, cc, ns, ns, box.next_gp()))
            out.append('        <object type="PU" os_index="%d" cpuset="%s" complete_cpuset="%s" nodeset="%s" '
                       'complete_nodeset="%s" gp_index="%d"/>' % (first + c, cc, cc, ns, ns, box.next_gp()))
            out.append("      </object>")
        for _, bus_range, children in box.io[p]:
            out.append('      <object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" bridge_pci="%s">'
                       % (box.next_gp(), bus_range))
            for c in children:
                emit_io(c, 8, 1)
            out.append("      </object>")
        out.append("    </object>")
    out.append("  </object>")

    if box.matrix is not None:
        objs = ["OSDev:%d" % gp for _, gp in box.osdevs] + ["PCIDev:%d" % gp for gp in box.switches]
        n = len(objs)
        values = box.matrix(len(box.osdevs), len(box.switches))
        assert len(values) == n * n
        hetero = len(box.switches) > 0
        if hetero:
            out.append('  <distances2hetero nbobjs="%d" kind="25" name="NVLinkBandwidth">' % n)
            text = "".join(o + " " for o in objs)
        else:
            out.append('  <distances2 type="OSDev" nbobjs="%d" kind="9" name="NVLinkBandwidth" indexing="gp">' % n)
            text = "".join("%d " % gp for _, gp in box.osdevs)
        out.append('    <indexes length="%d">%s</indexes>' % (len(text), text))
        for i in range(0, n * n, 10):
            chunk = "".join("%d " % v for v in values[i:i + 10])
            out.append('    <u64values length="%d">%s</u64values>' % (len(chunk), chunk))
        out.append("  </distances2hetero>" if hetero else "  </distances2>")
    out.append("</topology>")
    return "\n".join(out) + "\n"


def gpu(bus, index, nvml):
    return pci_dev("0000:%02x:00.0" % bus, GPU_TYPE, "nvml%d" % index if nvml else None)


def switch_with(bus, devices):
    """A PCIe switch below a root port: root port -> upstream port -> one
    downstream port per device. devices: [(bus, make(bus))]."""
    ports = [bridge("0000:%02x:%02x.0" % (bus + 1, i), "0000:[%02x-%02x]" % (b, b), [d])
             for i, (b, d) in enumerate(devices)]
    last = max(b for b, _ in devices)
    upstream = bridge("0000:%02x:00.0" % bus, "0000:[%02x-%02x]" % (bus + 1, last), ports)
    return bridge("0000:%02x:01.0" % (bus - 1), "0000:[%02x-%02x]" % (bus, last), [upstream], ROOT_PORT_TYPE)


def root_port(bus, device):
    return bridge("0000:%02x:01.0" % (bus - 1), "0000:[%02x-%02x]" % (bus, bus), [device], ROOT_PORT_TYPE)


def nvswitch8():
    """DGX/HGX H200-like: 2 sockets; each holds 2 host bridges, each a PCIe
    switch with 2 GPUs and a NIC; 4 NVSwitches behind a switch of their own on
    socket 0. hwloc with NVML: every GPU reaches the NVSwitches with 5, 4, 4
    and 5 links of 25000 MB/s (hwloc's NVLink 4 figure)."""
    box = Box(cores_per_package=4, packages=2)
    for p in range(2):
        for s in range(2):
            base = 0x10 + 0x40 * (2 * p + s)
            g = 2 * (2 * p + s)
            box.host_bridge(p, "0000:[%02x-%02x]" % (base, base + 8), [
                switch_with(base + 1, [(base + 3, gpu(base + 3, g, True)),
                                       (base + 4, gpu(base + 4, g + 1, True)),
                                       (base + 5, pci_dev("0000:%02x:00.0" % (base + 5), NIC_TYPE))])])
    box.host_bridge(0, "0000:[f0-f8]", [
        switch_with(0xf1, [(0xf3 + i, pci_dev("0000:%02x:00.0" % (0xf3 + i), NVSWITCH_TYPE)) for i in range(4)])])
    per_switch = [5 * 25000, 4 * 25000, 4 * 25000, 5 * 25000]

    def matrix(ngpu, nsw):
        n = ngpu + nsw
        m = [0] * (n * n)
        for i in range(n):
            m[i * n + i] = DIAGONAL
        for g in range(ngpu):
            for s in range(nsw):
                m[g * n + ngpu + s] = per_switch[s]
                m[(ngpu + s) * n + g] = per_switch[s]
        return m
    box.matrix = matrix
    return box


def pcie4():
    """4 GPUs, PCIe only, two sockets: GPUs 0 and 1 behind one PCIe switch on
    socket 0; GPUs 2 and 3 on socket 1, each on a root port of its own host
    bridge. No NVLink matrix (stock hwloc)."""
    box = Box(cores_per_package=4, packages=2)
    box.host_bridge(0, "0000:[10-18]", [switch_with(0x11, [(0x13, gpu(0x13, 0, False)), (0x14, gpu(0x14, 1, False))])])
    box.host_bridge(1, "0000:[80-81]", [root_port(0x81, gpu(0x81, 2, False))])
    box.host_bridge(1, "0000:[90-91]", [root_port(0x91, gpu(0x91, 3, False))])
    return box


def nvlink_pairs(with_matrix):
    """4 GPUs on one socket, two PCIe switches of 2 GPUs each; NVLink bridges
    pair GPU 0 with 1 and GPU 2 with 3 (4 links of 25000 MB/s each pair).
    with_matrix: as hwloc with NVML exports it; without: stock hwloc."""
    box = Box(cores_per_package=8, packages=1)
    box.host_bridge(0, "0000:[10-18]", [switch_with(0x11, [(0x13, gpu(0x13, 0, with_matrix)), (0x14, gpu(0x14, 1, with_matrix))])])
    box.host_bridge(0, "0000:[40-48]", [switch_with(0x41, [(0x43, gpu(0x43, 2, with_matrix)), (0x44, gpu(0x44, 3, with_matrix))])])
    if with_matrix:
        def matrix(ngpu, nsw):
            m = [0] * 16
            for i in range(4):
                m[i * 4 + i] = DIAGONAL
            for a, b in ((0, 1), (2, 3)):
                m[a * 4 + b] = m[b * 4 + a] = 4 * 25000
            return m
        box.matrix = matrix
    return box


def no_gpu():
    """One socket, a NIC and nothing NVIDIA."""
    box = Box(cores_per_package=4, packages=1)
    box.host_bridge(0, "0000:[00-02]", [root_port(0x01, pci_dev("0000:01:00.0", NIC_TYPE))])
    return box


FIXTURES = {
    "nvswitch8.xml": nvswitch8,
    "pcie4_2sockets.xml": pcie4,
    "nvlink_pairs.xml": lambda: nvlink_pairs(False),
    "nvlink_pairs_hwloc_nvml.xml": lambda: nvlink_pairs(True),
    "no_gpu.xml": no_gpu,
}

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    for name, make in FIXTURES.items():
        with open(os.path.join(here, name), "w") as f:
            f.write(render(make(), name))
        print("wrote", os.path.join(here, name))
