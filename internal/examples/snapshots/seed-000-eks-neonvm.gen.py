#!/usr/bin/env python3
# Generator of the seed-000 example: seed-000-eks-neonvm.txtar, .pods.json and .vms.json beside it.
# Run from anywhere: python3 internal/examples/snapshots/seed-000-eks-neonvm.gen.py
# What comes from seed 000 and what is reconstructed is written in the snapshot header it produces.
import hashlib, json, math

import os
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seed-000-eks-neonvm")
CPUS = 48
INTERVAL = 10  # seconds
CPU = "/sys/fs/cgroup/cpu,cpuacct"
MEM = "/sys/fs/cgroup/memory"
PIDS = "/sys/fs/cgroup/pids"
UNLIM_MEM = 9223372036854771712

def h(s, n):
    return hashlib.sha256(s.encode()).hexdigest()[:n]

def uid(name):
    x = h("uid:" + name, 32)
    return f"{x[:8]}-{x[8:12]}-4{x[13:16]}-a{x[17:20]}-{x[20:32]}"

def cid(name):
    return h("cid:" + name, 64)

def shares(m):
    if m <= 0: return 2
    return max(2, min(262144, m * 1024 // 1000))

# ---- pods --------------------------------------------------------------
pods = []  # dicts: name ns uid qos containers[(name, req, lim, usage, threads)] labels annotations
def pod(name, ns, qos, containers, u=None, labels=None, overhead=0):
    p = dict(name=name, ns=ns, uid=u or uid(ns + "/" + name), qos=qos, containers=containers,
             labels=labels or {}, annotations={})
    pods.append(p)
    return p

# Guaranteed pods: the six UIDs listed in the seed's `ls kubepods.slice`.
# cb6dc9c2 is the seed's overprovisioning pod with 2 CPUs (2048 shares); the
# other five are reconstructed (names and sizes).
pod("overprovisioning-6f7d78c958-2228t", "overprovisioning", "guaranteed",
    [("pause", 2000, 2000, 0.0)], u="cb6dc9c2-eda7-4e8a-8e4a-948169e57cdc")
pod("overprovisioning-6f7d78c958-7gq4t", "overprovisioning", "guaranteed",
    [("pause", 2000, 2000, 0.0)], u="22bf9367-60ee-4481-a762-addb5f83a056")
pod("compute-steep-cloud-73028561-7b9d6c5f4-j4m2x", "default", "guaranteed",
    [("compute-node", 4000, 4000, 0.9)], u="7bbd817f-b4d6-4e6f-8ac1-50bc6e270a2d")
pod("prometheus-agent-0", "monitoring", "guaranteed",
    [("prometheus", 1000, 1000, 0.45)], u="1035a83e-09cb-46e0-b56b-0ba59af9465c")
pod("compute-hidden-sea-61837204-85f7c9d6b-w7kq2", "default", "guaranteed",
    [("compute-node", 500, 500, 0.3)], u="17f65edb-b99c-4530-8d93-3ff62c64f50f")
pod("node-problem-detector-x9z4c", "kube-system", "guaranteed",
    [("node-problem-detector", 250, 250, 0.05)], u="7daf1144-d3b5-4531-9a59-221f96a36a2b")

# Burstable: daemon pods and compute pods whose requests sum to 31325m, so
# that the tier is MilliCPUToShares(31325) = 32076 and the pods' own shares
# (each rounded down) sum to 32052 — both figures from the seed.
daemons = [("aws-node", "kube-system", 25, 0.08), ("kube-proxy", "kube-system", 100, 0.12),
           ("ebs-csi-node", "kube-system", 30, 0.01), ("node-exporter", "monitoring", 200, 0.1),
           ("vector", "monitoring", 70, 0.35), ("autoscaler-agent", "kube-system", 120, 0.2),
           ("kube-state-metrics", "monitoring", 370, 0.15), ("neonvm-controller", "neonvm-system", 110, 0.09),
           ("cluster-autoscaler", "kube-system", 110, 0.05), ("pgbouncer", "default", 450, 0.15)]
for i, (n, ns, m, use) in enumerate(daemons):
    pod(f"{n}-{h(n,5)}", ns, "burstable", [(n, m, 0, use)])
# The seed's compute pod: 250m + 10m + 10m = 270m → 276 shares.
pod("compute-orange-recipe-53139292-5d85955d54-5hk7x", "default", "burstable",
    [("compute-node", 250, 0, 0.9), ("pg-exporter", 10, 0, 0.02), ("log-shipper", 10, 0, 0.01)],
    u="050b4a85-f401-4ddb-a585-3d2120ee0132")
adj = ["quiet", "bold", "wild", "calm", "dark", "late", "icy", "red", "old", "wispy", "shy", "proud", "long", "lucky",
       "snowy", "sweet", "young", "dry", "divine", "aged", "fancy", "tight", "plain", "rough", "small", "soft", "black",
       "still", "broad", "crimson", "green", "holy", "lingering", "morning", "muddy", "noisy", "polished"]
noun = ["pond", "sun", "moon", "hill", "wood", "dream", "dust", "rain", "fog", "leaf", "sky", "bird", "bonus", "math",
        "limit", "base", "snow", "paper", "cell", "night", "thunder", "frost", "grass", "feather", "tree", "band",
        "resonance", "water", "glade", "smoke", "star", "shadow", "truth", "voice", "wind", "breeze", "field"]
# 36 more compute pods with one container each (k*250m + 20m; fewer cgroups keep the file small), k in 8×1(other than the seed's), 14×2, 10×4, 5×8 → Σk = 116.
ks = [1] * 7 + [2] * 14 + [4] * 10 + [8] * 5
busy = {1: 0.7, 2: 1.1, 4: 1.35, 8: 1.9}
for i, k in enumerate(ks):
    name = f"compute-{adj[i]}-{noun[i]}-{int(h('n'+str(i),7),16)%90000000+10000000}-{h('rs'+str(i),9)}-{h('p'+str(i),5)}"
    pod(name, "default", "burstable",
        [("compute-node", 250 * k + 20, 0, busy[k])])

# BestEffort: NeonVM runner pods (no requests) for VMs of 0.25, 1 and 4 CPUs,
# and one plain BestEffort pod with no declared size.
vms = [("compute-silent-frost-42815591", "250m", "1", "250m", 0.25, 0.0008),
       ("compute-bold-river-17340288", "1", "2", "1", 1.0, 0.0009),
       ("compute-green-meadow-90412257", "2", "4", "4", 4.0, 0.0007)]
for vm, mn, mx, use, cores, used in vms:
    p = pod(f"{vm}-{h('vm'+vm,5)}", "default", "besteffort", [("neonvm-runner", 0, 0, used)],
            labels={"vm.neon.tech/name": vm, "vm.neon.tech/runner": "true"})
    p["vm"] = dict(name=vm, min=mn, max=mx, use=use, cores=cores)
pod("netshoot-7c9d4b8f5-q8r2n", "default", "besteffort", [("netshoot", 0, 0, 0.0005)])

# ---- cgroup tree -------------------------------------------------------
class CG:
    def __init__(s, path, w, quota=-1, usage=0.0, mem=0, memlim=UNLIM_MEM, procs=(), tasks=None):
        s.path, s.w, s.quota, s.own, s.mem, s.memlim = path, w, quota, usage, mem, memlim
        s.procs, s.tasks, s.kids = list(procs), tasks, []
    def add(s, c):
        s.kids.append(c)
        return c
    def usage(s):
        return s.own + sum(k.usage() for k in s.kids)
    def memory(s):
        return s.mem + sum(k.memory() for k in s.kids)

pid = [3000]
def newpid():
    pid[0] += 7
    return pid[0]

root = CG("/", 1024, usage=0.05)
sysd = root.add(CG("/system.slice", 1024))
for svc, use, mem in [("containerd.service", 0.2, 300 << 20), ("kubelet.service", 0.3, 180 << 20),
                      ("sshd.service", 0.0, 4 << 20), ("amazon-ssm-agent.service", 0.01, 40 << 20),
                      ("systemd-journald.service", 0.04, 60 << 20)]:
    sysd.add(CG("/system.slice/" + svc, 1024, usage=use, mem=mem, procs=[newpid()]))
user = root.add(CG("/user.slice", 1024, usage=0.02, mem=20 << 20, procs=[newpid()]))
alloc = CPUS * 1000 - 190  # EKS kube-reserved for 48 vCPUs: 60m + 10m + 2×5m + 44×2.5m
kp = root.add(CG("/kubepods.slice", shares(alloc)))
be = kp.add(CG("/kubepods.slice/kubepods-besteffort.slice", 2))
bu = kp.add(CG("/kubepods.slice/kubepods-burstable.slice", shares(sum(sum(c[1] for c in p["containers"]) for p in pods if p["qos"] == "burstable"))))
threads = {}  # tid → (run_ns, wait_ns) per sample
for p in pods:
    u_ = p["uid"].replace("-", "_")
    if p["qos"] == "guaranteed":
        parent, pname = kp, f"kubepods-pod{u_}.slice"
    else:
        parent = bu if p["qos"] == "burstable" else be
        pname = f"kubepods-{p['qos']}-pod{u_}.slice"
    req = sum(c[1] for c in p["containers"])
    lim = sum(c[2] for c in p["containers"]) if all(c[2] for c in p["containers"]) else 0
    pc = parent.add(CG(parent.path + "/" + pname, shares(req), quota=lim * 100 if lim else -1,
                       memlim=(512 << 20) * max(1, req // 250) if p["qos"] == "guaranteed" else UNLIM_MEM))
    sandbox = cid("sandbox:" + p["uid"])
    p["sandbox"] = sandbox
    pc.add(CG(pc.path + f"/cri-containerd-{sandbox}.scope", 2, mem=300 << 10, procs=[newpid()]))
    p["ids"] = []
    for (cn, creq, clim, use) in p["containers"]:
        i = cid(p["uid"] + "/" + cn)
        p["ids"].append(i)
        quota = clim * 100 if clim else -1
        tasks = None
        procs = [newpid()]
        if "vm" in p:
            vm = p["vm"]
            # The runner applies the VM's size as a CFS quota (reconstructed:
            # the runner really sets it on the QEMU process's cgroup).
            quota = int(vm["cores"] * 100000)
            qemu = newpid()
            procs.append(qemu)
            vcpus = max(1, math.ceil(vm["cores"]))
            tasks = []
            # runner: 3 mostly idle threads; qemu: main loop + vcpus busy threads + 2 io threads
            for t in range(3):
                tasks.append((procs[0] + t, "idle"))
            tasks.append((qemu, "idle"))
            for t in range(vcpus):
                tasks.append((qemu + 1 + t, "vcpu"))
            tasks += [(qemu + 1 + vcpus, "idle"), (qemu + 2 + vcpus, "idle")]
        elif use >= 0.05:
            # A busy container: more runnable threads than the CPU it gets
            # on this saturated node (their run + wait time says so).
            tasks = [(procs[0], "idle")] + [(procs[0] + 1 + t, "vcpu") for t in range(math.ceil(use) + 1)]
        mem = {True: 1 << 30}.get("vm" in p, (120 << 20) if cn == "compute-node" else (24 << 20))
        pc.add(CG(pc.path + f"/cri-containerd-{i}.scope", shares(creq) if creq else 2, quota=quota,
                  usage=use, mem=mem, procs=procs, tasks=tasks))

# ---- files ------------------------------------------------------------
first, second = {}, {}
BASE_NS = 8_640_000 * 10**9  # about 100 days of CPU on the node
def walk(c, fn):
    fn(c)
    for k in c.kids: walk(k, fn)

def cum(c):  # a cgroup's cumulative usage before sample 1, ns
    return int(int(h("base" + c.path, 8), 16) % 10**12 + c.usage() * 86400 * 10**9 * 3)

def files(c):
    d = f = {}
    p = "" if c.path == "/" else c.path
    u1 = cum(c)
    u2 = u1 + int(round(c.usage() * INTERVAL * 1e9))
    out1, out2 = {}, {}
    def both(name, v1, v2=None):
        out1[name] = v1
        out2[name] = v1 if v2 is None else v2
    cpu = CPU + p
    if c.path != "/":
        both(cpu + "/cpu.shares", f"{c.w}\n")
        both(cpu + "/cpu.cfs_period_us", "100000\n")
        both(cpu + "/cpu.cfs_quota_us", f"{c.quota}\n")
    else:
        both(cpu + "/cpu.shares", "1024\n")
    nper1 = int(u1 / 1e9 * 10) if c.quota > 0 else 0
    nper2 = nper1 + (INTERVAL * 10 if c.quota > 0 else 0)
    thr = 0  # starved, not throttled: the VMs never reach their quota
    both(cpu + "/cpu.stat", f"nr_periods {nper1}\nnr_throttled {nper1//3*thr}\nthrottled_time {nper1//3*thr*40000000}\n",
         f"nr_periods {nper2}\nnr_throttled {(nper1//3 + INTERVAL*10)*thr}\nthrottled_time {(nper1//3 + INTERVAL*10)*thr*40000000}\n")
    both(cpu + "/cpuacct.usage", f"{u1}\n", f"{u2}\n")
    both(cpu + "/cpuacct.stat", f"user {u1*7//10//10**7}\nsystem {u1*3//10//10**7}\n",
         f"user {u2*7//10//10**7}\nsystem {u2*3//10//10**7}\n")
    both(cpu + "/cgroup.procs", "".join(f"{x}\n" for x in c.procs))
    if c.kids and c.path != "/":
        both(cpu + "/tasks", "")
    if c.tasks is not None:
        both(cpu + "/tasks", "".join(f"{t}\n" for t, _ in c.tasks))
        for t, kind in c.tasks:
            st = f"/proc/{t}/task/{t}/schedstat"
            r1, w1, n1 = 10**12 + t * 1000, 5 * 10**12 + t * 1000, 10**6 + t
            if kind == "vcpu":
                # Runnable the whole interval: ran its sliver, waited the rest.
                run = c.own / max(1, sum(1 for _, k in c.tasks if k == "vcpu")) * INTERVAL * 1e9
                r2, w2 = r1 + int(run), w1 + int(INTERVAL * 1e9 - run)
            else:
                r2, w2 = r1 + 2_000_000, w1 + 100_000
            both(st, f"{r1} {w1} {n1}\n", f"{r2} {w2} {n1 + 500}\n")
    mem = MEM + p
    m = c.memory()
    inactive = m // 8
    both(mem + "/memory.usage_in_bytes", f"{m}\n")
    both(mem + "/memory.limit_in_bytes", f"{c.memlim}\n")
    both(mem + "/memory.stat", f"cache {m//4}\nrss {c.mem - c.mem//4}\ntotal_cache {m//4}\ntotal_rss {m - m//4}\n"
         f"total_inactive_file {inactive}\ntotal_pgfault {m//4096}\ntotal_pgmajfault {m//4096//500}\n")
    if c.path != "/":
        both(PIDS + p + "/pids.current", f"{max(len(c.procs), len(c.tasks or []))}\n")
    return out1, out2

allf1, allf2 = {}, {}
def collect(c):
    a, b = files(c)
    allf1.update(a); allf2.update(b)
walk(root, collect)

mountinfo = """30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:5 - cgroup2 cgroup2 rw,nsdelegate
31 25 0:27 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:6 - cgroup cgroup rw,xattr,name=systemd
34 25 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 25 0:31 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,memory
36 25 0:32 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,pids
37 25 0:33 / /sys/fs/cgroup/blkio rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,blkio
38 25 0:34 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,cpuset
39 25 0:35 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,freezer
"""
header = f"""cgwarden snapshot v1
seal: sha256
taken: 2023-10-29T14:00:00Z
interval: {INTERVAL}s
# origin: the EKS node of seed 000 (NeonVM, k8s 1.25, Amazon Linux 2, kernel 5.10, containerd 1.6, runc;
# cgroup v1 hybrid: cpu,cpuacct co-mounted, memory, pids, a cgroup2 at /sys/fs/cgroup/unified with no
# controllers; systemd driver).
# From the seed: the tier weights (kubepods-besteffort.slice 2, kubepods-burstable.slice 32076), the
# burstable pods' own shares summing to 32052 (no dilution), pod 050b4a85-… (default/compute-orange-
# recipe-53139292-5d85955d54-5hk7x, 250m+10m+10m) at 276, the Guaranteed overprovisioning pod
# cb6dc9c2-… at 2048, the six Guaranteed pod UIDs of the seed's `ls kubepods.slice`, and every
# BestEffort pod at 2 shares.
# Reconstructed (not measured): {CPUS} vCPUs (an m6i.12xlarge; 16 cannot hold the 31.3 cores of
# Burstable requests that 32076 shares imply), kubepods.slice = MilliCPUToShares(allocatable {alloc}m),
# the names and sizes of the other pods (chosen so that the burstable figures come out exactly as in the
# seed), three NeonVM runner pods whose VMs use 0.25, 1 and 4 CPUs (each runner container carries its
# VM's size as a CFS quota, standing for the quota the runner sets on QEMU), a plain BestEffort pod,
# memory figures, and the second sample {INTERVAL} s later with the node busy (about 47.7 of {CPUS}
# cores): the VMs' vCPU threads runnable the whole interval (their /proc schedstat) yet getting about
# 0.0008 cores each, whatever their size; the busy containers' threads likewise runnable the whole
# interval (more threads than the CPU they get); other cgroups carry no thread data.
"""
out = [header]
def sec(name, data):
    out.append(f"-- {name} --\n{data}")
sec("/proc/self/mountinfo", mountinfo)
sec("/sys/devices/system/cpu/online", f"0-{CPUS-1}\n")
for k in sorted(allf1):
    sec(k, allf1[k])
for k in sorted(allf2):
    if allf2[k] != allf1[k]:
        sec("next:" + k, allf2[k])
# The closing section cgwarden snapshot writes (internal/snapshot.Seal): the
# count of the sections before it and the SHA-256 of every byte before it.
body = "".join(out)
sealed = body + f"-- cgwarden-end --\nsections: {len(out) - 1}\nsha256: {hashlib.sha256(body.encode()).hexdigest()}\n"
open(OUT + ".txtar", "w").write(sealed)

# ---- pods file -----------------------------------------------------------
def q(m):
    return f"{m}m" if m % 1000 else str(m // 1000)
items = []
for p in pods:
    cs, sts = [], []
    for (cn, creq, clim, use), i in zip(p["containers"], p["ids"]):
        res = {}
        if creq: res.setdefault("requests", {})["cpu"] = q(creq)
        if clim: res.setdefault("limits", {})["cpu"] = q(clim)
        if p["qos"] == "guaranteed":
            res["requests"]["memory"] = res["limits"]["memory"] = "1Gi"
        elif p["qos"] == "burstable":
            res.setdefault("requests", {})["memory"] = "256Mi"
        ctr = {"name": cn, "image": f"example.invalid/{cn}:v1", "resources": res}
        if "vm" in p:
            # The NeonVM controller starts the runner with its VM's spec and
            # status, base64-encoded JSON, as arguments.
            import base64
            vm = p["vm"]
            spec = {"guest": {"cpus": {"min": vm["min"], "max": vm["max"], "use": vm["use"]},
                              "memorySlotSize": "1Gi", "memorySlots": {"min": 1, "max": 4, "use": 2}},
                    "qmp": 20183, "restartPolicy": "Never"}
            status = {"phase": "Pending"}
            ctr["command"] = ["runner", "-vmspec", base64.b64encode(json.dumps(spec, separators=(",", ":")).encode()).decode(),
                              "-vmstatus", base64.b64encode(json.dumps(status, separators=(",", ":")).encode()).decode()]
        cs.append(ctr)
        sts.append({"name": cn, "containerID": "containerd://" + i, "ready": True, "restartCount": 0,
                    "image": f"example.invalid/{cn}:v1", "imageID": "", "started": True,
                    "state": {"running": {"startedAt": "2023-10-28T09:00:00Z"}}})
    items.append({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": p["name"], "namespace": p["ns"], "uid": p["uid"],
                               **({"labels": p["labels"]} if p["labels"] else {})},
                  "spec": {"nodeName": "ip-10-6-42-17.us-east-2.compute.internal", "containers": cs},
                  "status": {"phase": "Running", "qosClass": {"guaranteed": "Guaranteed", "burstable": "Burstable",
                                                             "besteffort": "BestEffort"}[p["qos"]],
                             "startTime": "2023-10-28T09:00:00Z", "containerStatuses": sts}})
json.dump({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}},
          open(OUT + ".pods.json", "w"), indent=2)
vmitems = []
for p in pods:
    if "vm" not in p: continue
    vm = p["vm"]
    vmitems.append({"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
                    "metadata": {"name": vm["name"], "namespace": p["ns"], "uid": uid("vm:" + vm["name"])},
                    "spec": {"guest": {"cpus": {"min": vm["min"], "max": vm["max"], "use": vm["use"]},
                                       "memorySlotSize": "1Gi", "memorySlots": {"min": 1, "max": 4, "use": 2}}},
                    "status": {"phase": "Running", "podName": p["name"], "cpus": vm["use"]}})
json.dump({"apiVersion": "v1", "kind": "List", "items": vmitems, "metadata": {"resourceVersion": ""}},
          open(OUT + ".vms.json", "w"), indent=2)
bsum = sum(shares(sum(c[1] for c in p["containers"])) for p in pods if p["qos"] == "burstable")
print("burstable tier", bu.w, "children sum", bsum, "pods", len(pods), "root usage", root.usage())
