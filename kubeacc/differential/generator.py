"""Seeded scenarios for the differential test: small clusters that exercise every DRA feature.

A scenario is plain JSON in the API's shapes, fully defaulted as the API server would store it
(``allocationMode``, ``count``, toleration ``operator``): ``slices``, ``classes``, ``allocated``
(claims with ``status.allocation``), ``nodes``, ``claims`` and ``pods`` (claim indices: the
claims of one pod, which kube-scheduler allocates together; 1-3 per pod). :func:`scenario` also
returns the features it used, so a run can count the coverage of each.
"""

from __future__ import annotations

import random
from typing import Any

DRIVER = "gpu.example.com"
NIC = "nic.example.com"
A = f'device.attributes["{DRIVER}"]'
C = f'device.capacity["{DRIVER}"]'

#: Request selectors, each tagged with the feature it covers.
SELECTORS: tuple[tuple[str, str], ...] = (
    ("cel", f'{A}.model == "a100"'),
    ("cel", f'{A}.model != "a100" || {A}.numa == 1'),
    ("quantity", f'{C}.memory.compareTo(quantity("20Gi")) >= 0'),
    ("quantity", f'{C}.memory.isLessThan(quantity("40Gi"))'),
    ("version", f'{A}.driverVersion.isGreaterThan(semver("1.2.3"))'),
    ("version", f'{A}.driverVersion.compareTo(semver("1.2.3")) == 0'),
    ("cel-macro", f'["a100", "h100"].exists(m, m == {A}.model)'),
    ("cel-macro", f'{A}.all(k, k != "broken")'),
    ("cel-macro", f'{A}.exists_one(k, k == "ecc")'),
    ("cel-bind", f'cel.bind(a, {A}, a.numa == 0 && a.model.startsWith("a"))'),
    ("cel-in", f'"ecc" in {A} && {A}.ecc'),
    ("cel-error", f"{A}.ecc"),
    ("cel-error", f'{A}["d"] == 1 || "d" in {A}'),
    ("cel-bool-int", f"{A}.flag == true"),
    ("cel", "device.allowMultipleAllocations == false"),
)

#: Selectors for the rest of kube-scheduler's CEL environment, drawn from the later stream.
#: Some fail to compile there (mixed literals, strings v3, cost) or at run time (missing
#: attributes, asInteger of a fraction): both sides must fail alike.
LATER_SELECTORS: tuple[tuple[str, str], ...] = (
    ("cel-regex", f'{A}.model.find("[0-9]+") == "100"'),
    ("cel-regex", f'{A}.model.findAll("[a-z]").size() == 1'),
    ("cel-regex", f'{A}.model.matches("^(a|h)1")'),
    ("cel-strings-ext", f'strings.quote({A}.model) == "\\"a100\\""'),
    ("cel-strings-ext", f'{A}.model.upperAscii().startsWith("H")'),
    ("cel-strings-ext", f'{A}.model.split("1").size() == 2'),
    ("cel-lists-ext", f"lists.range(4).exists(i, i == {A}.index)"),
    ("cel-lists-ext", f'["t4", "a100"].sort()[0] == {A}.model'),
    ("cel-lists-ext", f"[{A}.numa, 1, 0].isSorted()"),
    ("cel-lists-ext", f"[{A}.index, 2].max() == 2"),
    ("cel-sets", f'sets.contains(["a100", "h100"], [{A}.model])'),
    ("cel-sets", f"sets.intersects([0], [{A}.numa])"),
    ("cel-ip", f"isIP({A}.addr) && ip({A}.addr).family() == 4"),
    ("cel-ip", f'cidr("10.0.0.0/8").containsIP({A}.addr)'),
    ("cel-ip", f'isCIDR({A}.addr + "/24")'),
    ("cel-url", f'url({A}.endpoint).getScheme() == "https"'),
    ("cel-url", f'isURL({A}.endpoint) && url({A}.endpoint).getHostname().endsWith(".com")'),
    ("cel-two-var", f'{A}.exists(k, v, k == "model" && v == "h100")'),
    ("cel-two-var", f"[1, 2].transformList(i, v, v * {A}.numa).sum() == 3"),
    ("cel-optional", f"{A}.?ecc.orValue(false)"),
    ("cel-optional", f'{{"a": 1}}[?{A}.model].orValue(0) == 0'),
    ("cel-unicode", f"{A}.label.size() == 5"),
    ("cel-has", f"has({A}.ecc) && {A}.ecc"),
    ("cel-has", 'has(device.attributes["other.example.com"].x)'),
    (
        "cel-quantity-error",
        f'{C}.memory.compareTo(quantity("1.5")) > 0 && quantity("1.5").asInteger() == 1',
    ),
    ("cel-compile-error", f'[1, "a"].size() == 2 || {A}.numa == 0'),
    ("cel-compile-error", f'{{"a": 1, "b": "c"}}.size() == 2 || {A}.numa == 0'),
    ("cel-compile-error", f'{A}.model.reverse() == "001a"'),
    ("cel-cost", "lists.range(2000).all(i, lists.range(2000).all(j, i >= 0))"),
)

#: Selectors for the CEL functions the engine reaches through renamed calls (see
#: kubeacc.engine.celrewrite), drawn from the later stream after the ones above.
RENAMED_SELECTORS: tuple[tuple[str, str], ...] = (
    ("cel-cross-numeric", f"1 < 2.0 && {A}.numa >= 0"),
    ("cel-cross-numeric", f"{A}.index > 0.5 || 2u > 3.0"),
    ("cel-cross-numeric", f"{A}.numa <= 1u && -1 < 0.5"),
    ("cel-ip-string", f'string(ip({A}.addr)).startsWith("10.")'),
    ("cel-ip-string", f'string(cidr({A}.addr + "/16").masked()) == "10.1.0.0/16"'),
    ("cel-ip-string", f'string(cidr({A}.addr + "/8")).endsWith(".3/8")'),
    ("cel-list-index", f'["t4", "a100", "h100"].indexOf({A}.model) >= 1'),
    ("cel-list-index", f"[0, 1, 1].lastIndexOf({A}.numa) == 2"),
    ("cel-list-index", f'{A}.model.indexOf("1") == 1 && [1.5, 2.0].indexOf(2.0) == 1'),
    ("cel-list-index", f"[1.0].indexOf({A}.numa) == -1"),
    ("cel-transform-map", f'{{"a": 1, "b": 2}}.transformMap(k, v, v * {A}.numa)["b"] == 2'),
    ("cel-transform-map", f"[{A}.model].transformMapEntry(i, m, {{m: i}}).size() == 1"),
    ("cel-transform-map", f"[1, {A}.numa].transformMapEntry(i, v, {{v: i}}).size() == 2"),
    ("cel-transform-map", f'{A}.transformMap(k, v, k != "index", k).size() >= 3'),
)

#: ``string.format`` (kubeacc.engine.celformat), drawn from a stream of its own
FORMAT_SELECTORS: tuple[tuple[str, str], ...] = (
    ("cel-format", f'"%s-%d".format([dyn({A}.model), dyn({A}.numa)]) == "a100-0"'),
    ("cel-format", f'"%s".format([dyn({A}.model)]).startsWith("h")'),
    ("cel-format", f'"%x".format([dyn({A}.model)]) == "61313030"'),
    ("cel-format", f'"%b|%o".format([dyn({A}.index), dyn({A}.index)]).endsWith("|1")'),
    ("cel-format", f'"%.2f".format([double(dyn({A}.numa)) * 1234.5]) == "1,234.50"'),
    ("cel-format", f'"%e".format([double(dyn({A}.index)) + 0.5]).startsWith("1.5")'),
    ("cel-format", f'"%s".format([[dyn({A}.model), 1.5, {{"k": dyn({A}.numa)}}]]).size() > 20'),
    ("cel-format", f'"%s".format([{A}]).contains(\'"model":"h100"\')'),
    ("cel-format", f'"%s".format([{C}]).size() > 2'),
    ("cel-format", '"%s %s".format(["a", 1.0 / 3.0]) == "a 0.3333333333333333"'),
    ("cel-format-compile-error", f'"%s".format([{A}.model]) == "a100"'),
    ("cel-format-compile-error", f'"%d %d".format([1]) == "" || {A}.numa == 0'),
    ("cel-format-compile-error", f'"%s".format(["a", {A}.numa]) != ""'),
    ("cel-format-error", f'"%d".format([dyn({A}.model)]) == "0" || {A}.numa == 1'),
    ("cel-format-error", f'{A}.numa == 1 || "%s".format(dyn([{C}.memory])) == ""'),
)

#: the ``format`` library (kubeacc.engine.celformatlib), drawn from a stream of its own
FORMAT_LIBRARY_SELECTORS: tuple[tuple[str, str], ...] = (
    ("cel-format-library", f"!format.dns1123Label().validate({A}.model).hasValue()"),
    ("cel-format-library", f"format.dns1035Label().validate({A}.model) == optional.none()"),
    ("cel-format-library", f'format.named("labelValue").value().validate({A}.label).hasValue()'),
    ("cel-format-library", f'format.uri().validate({A}.endpoint).orValue(["x"]).size() == 1'),
    ("cel-format-library", f'!format.qualifiedName().validate("{DRIVER}/" + {A}.model).hasValue()'),
    (
        "cel-format-library",
        f"format.named({A}.model).hasValue() || format.dns1123SubdomainPrefix() != format.uri()",
    ),
    (
        "cel-format-library",
        f'format.dns1123LabelPrefix().validate({A}.model + "-").value()[0].startsWith("a")'
        f" || {A}.numa == 1",
    ),
    ("cel-format-library-error", f"format.uuid().validate({A}.model).value()[1] == ''"),
    ("cel-format-library-compile-error", f"format.named({A}.numa).hasValue()"),
    ("cel-format-library-compile-error", f"format.nope().validate({A}.model).hasValue()"),
)

#: constraint attributes (qualified)
MATCH_ATTRS = (f"{DRIVER}/model", f"{DRIVER}/numa", f"{DRIVER}/driverVersion", f"{DRIVER}/flag")
DISTINCT_ATTRS = (f"{DRIVER}/index", f"{DRIVER}/numa")
BIG = f'{C}.memory.compareTo(quantity("20Gi")) >= 0'
VERSIONS = ("1.2.3", "1.2.3+build.5", "1.10.0", "2.0.0-rc.1", "1.2.4")

#: selectors of the edges kube-scheduler's CEL environment has (issue 49), by feature
EDGE_SELECTORS: tuple[tuple[str, str], ...] = (
    ("cel-has-domain", "has(device.attributes.x)"),
    ("cel-has-domain", "has(device.capacity.other)"),
    ("cel-has-domain", f'has(device.attributes.x) && {A}.model == "a100"'),
    ("cel-has-domain", f"!has(device.attributes.x.y) && {A}.numa >= 0"),
    ("cel-has-domain", "device.attributes.?other.hasValue()"),
    ("quantity-representation", f"{C}.memory.isInteger()"),
    ("quantity-representation", f"{C}.memory.asInteger() > 0"),
    ("quantity-representation", f'{C}.memory == quantity("20Gi")'),
    ("quantity-representation", f'{C}.memory != quantity("40Gi")'),
    ("quantity-representation", f'{C}.memory.add(quantity("500m")).isInteger()'),
    ("quantity-representation", f'{C}.memory.sub(quantity("1.5")).add(1).isInteger()'),
    ("quantity-representation", 'quantity("0.5Ti").isInteger() || quantity("1000m").isInteger()'),
    ("cel-compile-member", f"{C}.memory.sign() == 1"),
    ("cel-compile-member", f"sign({C}.memory) == 1"),
    # past the evaluator's 10,000-iteration cap (kube-scheduler's CEL library runs them):
    # cheap, matched only on NUMA node 1, and cancelled for cost after ~16,000 iterations
    ("cel-long-comprehension", "lists.range(110).all(i, lists.range(100).all(j, i + j >= 0))"),
    (
        "cel-long-comprehension",
        f"lists.range(110).exists(i, lists.range(100).exists(j, i * j == 10791 && {A}.numa == 1))",
    ),
    (
        "cel-long-comprehension",
        "lists.range(200).all(i, lists.range(100).all(j, [[i], [j], [i], [j]].size() == 4))",
    ),
)
#: spellings of the generator's memory sizes in Go's other forms (same values): a decimal
#: (a binary suffix with a fraction), an integer with a negative scale, a plain integer
SPELLINGS = {
    "16Gi": ("0.015625Ti", "17179869184000m", "16384Mi"),
    "20Gi": ("0.01953125Ti", "21474836480000m", "20480Mi"),
    "40Gi": ("0.0390625Ti", "42949672960000m", "40960Mi"),
}


class _Gen:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        #: draws of features added later, from their own stream so that the scenarios the
        #: older features drew stay the same seed for seed
        self.later = random.Random(seed ^ 0x5EED_CAFE)
        self.formats = random.Random(seed ^ 0xF0_4A7)
        self.format_library = random.Random(seed ^ 0xF0_11B)
        #: taints with the ``None`` effect (degraded, still usable), a stream of their own
        self.degraded = random.Random(seed ^ 0xDE6_7A1)
        #: capacity requests and policies at the edges of the allocator's range arithmetic
        self.edges = random.Random(seed ^ 0xCA9_ED6E)
        #: compatibility groups on counters devices consume
        self.groups = random.Random(seed ^ 0xC0_6B0)
        #: the shapes of compatibility groups for an allocator that enforces them
        self.shapes = random.Random(seed ^ 0xC0_6B1)
        #: the shapes of issue 49: has() on a domain, quantity forms, library calls that do not
        #: compile, firstAvailable with distinct versions, older pool generations
        self.edges49 = random.Random(seed ^ 0x49_ED6E)
        self.features: set[str] = set()
        self.devices: list[tuple[str, str, str, dict[str, Any]]] = []  # driver, pool, name, raw

    def chance(self, p: float, feature: str | None = None) -> bool:
        hit = self.r.random() < p
        if hit and feature:
            self.features.add(feature)
        return hit

    def later_chance(self, p: float, feature: str) -> bool:
        hit = self.later.random() < p
        if hit:
            self.features.add(feature)
        return hit

    def capacity_name(self) -> str:
        """``memory`` as a slice or claim may write it: short, or qualified by the driver
        (the allocator looks names up literally, so the two are different capacities)."""
        return f"{DRIVER}/memory" if self.later_chance(0.3, "qualified-capacity") else "memory"

    # -- devices and slices ------------------------------------------------------------
    def device(self, name: str, index: int, shared_counter: str | None) -> dict[str, Any]:
        r = self.r
        attrs: dict[str, Any] = {
            "model": {"string": r.choice(("a100", "h100", "t4"))},
            "index": {"int": index},
            "numa": {"int": r.choice((0, 1))},
            "driverVersion": {"version": r.choice(VERSIONS)},
        }
        if self.chance(0.5):
            attrs["ecc"] = {"bool": r.choice((True, False))}
        if self.chance(0.2, "bool-vs-int"):
            attrs["flag"] = r.choice(({"bool": True}, {"int": 1}))
        if self.later_chance(0.6, "network-attributes"):
            lr = self.later
            attrs["addr"] = {
                "string": lr.choice(("10.0.0.5", "10.1.2.3", "192.168.1.7", "fd00::1"))
            }
            attrs["endpoint"] = {
                "string": lr.choice(("https://a.example.com:8443/x?q=1", "http://b.example.org/y"))
            }
            attrs["label"] = {"string": lr.choice(("gpu-\u00e9", "gpu-a", "\u00fcn\u00efts"))}
        if self.chance(0.3):
            attrs["resource.kubernetes.io/pcieRoot"] = {"string": r.choice(("pci0", "pci1"))}
        mem = r.choice(("16Gi", "20Gi", "40Gi"))
        cap = self.capacity_name()
        dev: dict[str, Any] = {
            "name": name,
            "attributes": attrs,
            "capacity": {cap: {"value": mem}},
        }
        if self.chance(0.15, "consumable-capacity"):
            dev["allowMultipleAllocations"] = True
            policy: dict[str, Any] = {"default": "4Gi"}
            if r.random() < 0.5:
                policy["validRange"] = {"min": "2Gi", "step": "2Gi"}
            else:
                policy["validValues"] = ["4Gi", "8Gi", "16Gi"]
            dev["capacity"][cap]["requestPolicy"] = policy
        if shared_counter and self.chance(0.7, "counters"):
            dev["consumesCounters"] = [
                {
                    "counterSet": shared_counter,
                    "counters": {"mem": {"value": r.choice(("10Gi", "20Gi"))}},
                }
            ]
        if self.chance(0.12, "taints"):
            dev["taints"] = [
                {
                    "key": "k",
                    "value": r.choice(("v", "w")),
                    "effect": r.choice(("NoSchedule", "NoExecute")),
                }
            ]
        return dev

    def pool(
        self, pool: str, select: dict[str, Any], ndev: int, driver: str = DRIVER
    ) -> list[dict[str, Any]]:
        r = self.r
        gen = 1
        slices: list[dict[str, Any]] = []
        old = self.chance(0.12, "generations")
        if old:
            gen = 2
        counter_set = "cs0" if self.chance(0.25) else None
        nslices = 2 if ndev > 3 and r.random() < 0.4 else 1
        count = nslices + (1 if counter_set else 0)
        if self.chance(0.08, "incomplete-pools"):
            count += 1
        per = [ndev // nslices + (1 if i < ndev % nslices else 0) for i in range(nslices)]
        k = 0
        for si in range(nslices):
            devs = []
            for _ in range(per[si]):
                devs.append(self.device(f"dev-{k}", k, counter_set))
                k += 1
            if si == 0 and k and self.chance(0.03, "duplicate-names"):
                devs.append(self.device("dev-0", 99, None))
            spec = {
                "driver": driver,
                "pool": {"name": pool, "generation": gen, "resourceSliceCount": count},
                **select,
                "devices": devs,
            }
            if "perDeviceNodeSelection" in select:
                for d in devs:
                    d.update(r.choice(({"nodeName": "n0"}, {"nodeName": "n1"}, {"allNodes": True})))
            slices.append({"metadata": {"name": f"{pool}-{si}"}, "spec": spec})
            for d in devs:
                self.devices.append((driver, pool, d["name"], d))
        if counter_set:
            slices.append(
                {
                    "metadata": {"name": f"{pool}-counters"},
                    "spec": {
                        "driver": driver,
                        "pool": {"name": pool, "generation": gen, "resourceSliceCount": count},
                        **({"allNodes": True} if "nodeName" not in select else select),
                        "sharedCounters": [
                            {
                                "name": counter_set,
                                "counters": {"mem": {"value": r.choice(("20Gi", "40Gi"))}},
                            }
                        ],
                    },
                }
            )
        if old:
            target = r.choice((select, {"nodeName": "n1"}, {"nodeName": "n0"}))
            devs = [self.device(f"old-{i}", i, None) for i in range(r.randint(1, 3))]
            slices.append(
                {
                    "metadata": {"name": f"{pool}-old"},
                    "spec": {
                        "driver": driver,
                        "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                        **target,
                        "devices": devs,
                    },
                }
            )
            if r.random() < 0.5:  # the newest generation targets another node only
                for s in slices:
                    if s["spec"]["pool"]["generation"] == gen and "nodeName" in s["spec"]:
                        s["spec"]["nodeName"] = "n1" if s["spec"]["nodeName"] == "n0" else "n0"
        return slices

    def pods(self, nclaims: int) -> list[list[int]]:
        """The claims in order, cut into pods of 1-3."""
        out: list[list[int]] = []
        i = 0
        while i < nclaims:
            size = self.later.choice((1, 1, 2, 2, 3))
            out.append(list(range(i, min(nclaims, i + size))))
            i += size
        if any(len(p) > 1 for p in out):
            self.features.add("pods")
        return out

    def taint_degraded(self, slices: list[dict[str, Any]]) -> None:
        """``None``-effect taints on some devices (beside any other taint): the allocator
        ignores them, so a degraded device is still given out, tolerated or not."""
        rd = self.degraded
        for s in slices:
            for dev in s["spec"].get("devices") or []:
                if rd.random() < 0.1:
                    taint = {"key": rd.choice(("health", "k")), "value": "v", "effect": "None"}
                    dev["taints"] = [*dev.get("taints", []), taint]
                    self.features.add("taint-none")

    def capacity_edges(self, slices: list[dict[str, Any]], claims: list[dict[str, Any]]) -> None:
        """Capacity requests and policies at the edges of v1.37's 64-bit range arithmetic:
        requests above MaxInt64 or rounding up to a step past it, fractional ``min``, negative
        requests and capacities (stored before validation). The allocator fails the pod on the
        unrepresentable and the negative ones once a device reaches its capacity check."""
        re_ = self.edges
        for s in slices:
            for dev in s["spec"].get("devices") or []:
                for cap in (dev.get("capacity") or {}).values():
                    rng = (cap.get("requestPolicy") or {}).get("validRange")
                    if rng and re_.random() < 0.4:
                        rng["min"] = re_.choice(("2Gi", "1500m", "0"))
                        rng["step"] = re_.choice(("3Ei", "2Gi", "1"))
                        self.features.add("capacity-range-edges")
                    if re_.random() < 0.005:
                        cap["value"] = "-1Gi"
                        self.features.add("capacity-negative")
        for claim in claims:
            for req in claim["spec"]["devices"]["requests"]:
                for exact in [req["exactly"]] if "exactly" in req else req["firstAvailable"]:
                    wanted = (exact.get("capacity") or {}).get("requests")
                    if wanted is None:
                        if re_.random() >= 0.03:
                            continue
                        name = f"{DRIVER}/memory" if re_.random() < 0.3 else "memory"
                        wanted = {name: "4Gi"}
                        exact["capacity"] = {"requests": wanted}
                    elif re_.random() >= 0.3:
                        continue
                    for name in wanted:
                        wanted[name] = re_.choice(("9Ei", "10E", "7Ei", "2500m", "-4Gi"))
                    self.features.add("capacity-unrepresentable")

    def compatibility_groups(self, slices: list[dict[str, Any]]) -> None:
        """Compatibility groups on some counter consumptions. v1.37 ignores such a slice with
        its alpha gate off (its pool is then incomplete); v1.36's API has no such field."""
        rg = self.groups
        for s in slices:
            for dev in s["spec"].get("devices") or []:
                for consumed in dev.get("consumesCounters") or []:
                    if rg.random() < 0.08:
                        consumed["compatibilityGroups"] = [rg.choice(("whole", "parts"))]
                        self.features.add("compatibility-groups")

    def group_shapes(self, slices: list[dict[str, Any]], allocated: list[dict[str, Any]]) -> None:
        """Compatibility groups in the shapes an enforcing allocator (DRADeviceCompatibilityGroups
        on) judges: per pool with counters, every consumption in one group, devices split between
        two, overlapping lists, groups mixed with none; sometimes a second counter set that some
        devices also consume (groups judged per set), room for more devices per set, counters
        on pools that had none, and an existing allocation of a grouped device (the groups
        already placed on a set)."""
        rs = self.shapes
        pools: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
        for s in slices:
            spec = s["spec"]
            pools.setdefault(
                (spec["driver"], spec["pool"]["name"], spec["pool"]["generation"]), []
            ).append(s)
        choices = {
            "same": (("a",),),
            "split": (("a",), ("b",)),
            "overlap": (("a",), ("b",), ("a", "b"), ("b", "c")),
            "mixed": ((), ("a",), ("a", "b")),
        }
        grouped: list[tuple[str, str, dict[str, Any]]] = []
        for (driver, pool, _), group in pools.items():
            devices = [d for s in group for d in s["spec"].get("devices") or []]
            counters = [s for s in group if s["spec"].get("sharedCounters")]
            if not counters and devices and rs.random() < 0.5:
                counters = [self._counter_slice(group)]
                slices.append(counters[0])
                for d in devices:
                    if rs.random() < 0.8:
                        d["consumesCounters"] = [
                            {"counterSet": "cs0", "counters": {"mem": {"value": "10Gi"}}}
                        ]
            consuming = [d for d in devices if d.get("consumesCounters")]
            if not counters or not consuming or rs.random() < 0.15:
                continue
            self.features.add("compatibility-group-shapes")
            sets = counters[0]["spec"]["sharedCounters"]
            if rs.random() < 0.5:
                sets[0]["counters"]["mem"]["value"] = rs.choice(("60Gi", "80Gi"))
            if rs.random() < 0.3:
                sets.append({"name": "cs1", "counters": {"mem": {"value": "40Gi"}}})
                for d in consuming:
                    if rs.random() < 0.6:
                        d["consumesCounters"].append(
                            {"counterSet": "cs1", "counters": {"mem": {"value": "10Gi"}}}
                        )
                self.features.add("compatibility-groups-two-sets")
            shape = choices[rs.choice(sorted(choices))]
            for d in consuming:
                for consumed in d["consumesCounters"]:
                    picked = rs.choice(shape)
                    if picked:
                        consumed["compatibilityGroups"] = list(picked)
                    else:
                        consumed.pop("compatibilityGroups", None)
                grouped.append((driver, pool, d))
        if grouped and rs.random() < 0.5:
            driver, pool, d = rs.choice(grouped)
            res: dict[str, Any] = {"request": "r0", "driver": driver, "pool": pool}
            res["device"] = d["name"]
            if d.get("allowMultipleAllocations"):
                res["shareID"] = "00000000-0000-0000-0000-0000000000aa"
            allocated.append(
                {
                    "metadata": {"name": "grouped", "namespace": "default", "uid": "uid-grouped"},
                    "spec": {"devices": {"requests": []}},
                    "status": {"allocation": {"devices": {"results": [res]}}},
                }
            )
            self.features.add("compatibility-groups-allocated")

    @staticmethod
    def _counter_slice(group: list[dict[str, Any]]) -> dict[str, Any]:
        """A counter slice for a pool that had none (the pool's slice count grows by it)."""
        first = group[0]["spec"]
        for s in group:
            s["spec"]["pool"]["resourceSliceCount"] += 1
        select = {k: first[k] for k in ("nodeName", "allNodes", "nodeSelector") if k in first}
        return {
            "metadata": {"name": f"{first['pool']['name']}-counters"},
            "spec": {
                "driver": first["driver"],
                "pool": dict(first["pool"]),
                **(select or {"allNodes": True}),
                "sharedCounters": [{"name": "cs0", "counters": {"mem": {"value": "40Gi"}}}],
            },
        }

    def bind(self, devs: list[dict[str, Any]]) -> None:
        """Binding conditions on one of the devices: the allocator then searches the whole
        pool after the pools without any."""
        if devs:
            dev = self.later.choice(devs)
            dev["bindingConditions"] = ["example.com/ready"]
            dev["bindingFailureConditions"] = ["example.com/failed"]

    # -- issue 49's shapes --------------------------------------------------------------
    def scheduler_edges(
        self,
        slices: list[dict[str, Any]],
        claims: list[dict[str, Any]],
        pods: list[list[int]],
        allocated: list[dict[str, Any]],
    ) -> None:
        """Issue 49's shapes, from a stream of their own (the other draws stay the same)."""
        e = self.edges49
        if e.random() < 0.3:
            self.features.add("quantity-representation")
            for s in slices:
                for dev in s["spec"].get("devices") or []:
                    for cap in (dev.get("capacity") or {}).values():
                        if cap.get("value") in SPELLINGS and e.random() < 0.6:
                            cap["value"] = e.choice(SPELLINGS[cap["value"]])
        requests = [
            sub
            for c in claims
            for req in c["spec"]["devices"]["requests"]
            for sub in ([req["exactly"]] if "exactly" in req else req["firstAvailable"])
        ]
        for _ in range(e.choice((0, 0, 1, 2))):
            if not requests:
                break
            feature, expr = e.choice(EDGE_SELECTORS)
            self.features.add(feature)
            e.choice(requests).setdefault("selectors", []).append({"cel": {"expression": expr}})
        if e.random() < 0.25:
            self.features.add("distinct-versions")
            n = len(claims)
            subs = [
                {
                    "name": "s0",
                    "deviceClassName": "gpu",
                    "allocationMode": "ExactCount",
                    "count": e.choice((2, 3)),
                },
                {
                    "name": "s1",
                    "deviceClassName": "gpu",
                    "allocationMode": "ExactCount",
                    "count": 1,
                },
            ]
            claims.append(
                {
                    "metadata": {"name": f"c{n}", "namespace": "default", "uid": f"uid-c{n}"},
                    "spec": {
                        "devices": {
                            "requests": [{"name": "r0", "firstAvailable": subs}],
                            "constraints": [{"distinctAttribute": f"{DRIVER}/driverVersion"}],
                        }
                    },
                }
            )
            pods.append([n])
        if e.random() < 0.3:
            self.older_generations(slices, allocated)

    def older_generations(
        self, slices: list[dict[str, Any]], allocated: list[dict[str, Any]]
    ) -> None:
        """A pool whose newest generation targets only one node while an older one, complete
        or not, targets the other: the scheduler uses the older generation there (v0.37.2's
        pool gathering). Devices of both generations share names; some are allocated."""
        e = self.edges49
        self.features.add("generations-older")
        pool = "gens"
        old_node, new_node = e.choice((("n0", "n1"), ("n1", "n0")))
        old_slices = e.choice((1, 2))
        old_count = old_slices + (1 if e.random() < 0.25 else 0)  # sometimes incomplete
        counters = e.random() < 0.4
        k = 0
        out: list[dict[str, Any]] = []
        for si in range(old_slices):
            # an older slice on the newest generation's node makes the pool look incomplete
            node = new_node if si == 1 and e.random() < 0.3 else old_node
            devs = []
            for _ in range(e.randint(1, 3)):
                dev = self.device(f"dev-{k}", k, "cs0" if counters else None)
                devs.append(dev)
                k += 1
            out.append(
                {
                    "metadata": {"name": f"{pool}-a{si}"},
                    "spec": {
                        "driver": DRIVER,
                        "pool": {"name": pool, "generation": 1, "resourceSliceCount": old_count},
                        "nodeName": node,
                        "devices": devs,
                    },
                }
            )
        if counters:
            for s in out:
                s["spec"]["pool"]["resourceSliceCount"] += 1
            out.append(
                {
                    "metadata": {"name": f"{pool}-counters"},
                    "spec": {
                        "driver": DRIVER,
                        "pool": {
                            "name": pool,
                            "generation": 1,
                            "resourceSliceCount": old_count + 1,
                        },
                        "nodeName": old_node,
                        "sharedCounters": [
                            {
                                "name": "cs0",
                                "counters": {"mem": {"value": e.choice(("20Gi", "40Gi"))}},
                            }
                        ],
                    },
                }
            )
        target = e.choice(
            (
                {"nodeName": new_node},
                {
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": [new_node],
                                    }
                                ]
                            }
                        ]
                    }
                },
            )
        )
        new_slices = e.choice((1, 2))
        for si in range(new_slices):
            devs = [self.device(f"dev-{e.randint(0, 4)}", si, None)]
            out.append(
                {
                    "metadata": {"name": f"{pool}-b{si}"},
                    "spec": {
                        "driver": DRIVER,
                        "pool": {
                            "name": pool,
                            "generation": e.choice((2, 3)) if si == 0 else 2,
                            "resourceSliceCount": new_slices,
                        },
                        **target,
                        "devices": devs,
                    },
                }
            )
        for s in out:  # shares of one device name in both generations, capacity spelled apart
            for d in s["spec"].get("devices") or []:
                if "allowMultipleAllocations" not in d and e.random() < 0.4:
                    d["allowMultipleAllocations"] = True
                    cap = d.setdefault("capacity", {})
                    if cap and e.random() < 0.5:
                        (name, value), *_ = cap.items()
                        other = f"{DRIVER}/memory" if name == "memory" else "memory"
                        d["capacity"] = {other: value}
        # names must be unique within a generation's slices
        seen: set[tuple[int, str]] = set()
        for s in out:
            gen = s["spec"]["pool"]["generation"]
            for d in s["spec"].get("devices") or []:
                while (gen, d["name"]) in seen:
                    d["name"] += "x"
                seen.add((gen, d["name"]))
        slices += out
        if e.random() < 0.6:
            # allocated devices of the pool by name: a share consumes capacity by the name one
            # generation's device wrote, which the other generation's device may not have
            by_name: dict[str, list[dict[str, Any]]] = {}
            for s in out:
                for d in s["spec"].get("devices") or []:
                    by_name.setdefault(d["name"], []).append(d)
            results = []
            for i, name in enumerate(e.sample(sorted(by_name), min(len(by_name), e.randint(1, 2)))):
                res: dict[str, Any] = {
                    "request": f"r{i}",
                    "driver": DRIVER,
                    "pool": pool,
                    "device": name,
                }
                shared = [d for d in by_name[name] if d.get("allowMultipleAllocations")]
                if shared or e.random() < 0.2:
                    res["shareID"] = f"00000000-0000-0000-0000-00000000004{i}"
                    written = [w for d in by_name[name] for w in d.get("capacity") or {}]
                    res["consumedCapacity"] = {
                        e.choice(written or ["memory"]): e.choice(("4Gi", "8Gi", "16Gi", "40Gi"))
                    }
                results.append(res)
            allocated.append(
                {
                    "metadata": {"name": "gens-alloc", "namespace": "default", "uid": "uid-gens"},
                    "spec": {"devices": {"requests": []}},
                    "status": {"allocation": {"devices": {"results": results}}},
                }
            )

    # -- claims ------------------------------------------------------------------------
    def selectors(self) -> list[dict[str, Any]]:
        out = []
        for _ in range(self.r.choice((0, 1, 1, 2))):
            feature, expr = self.r.choice(SELECTORS)
            self.features.add(feature)
            out.append({"cel": {"expression": expr}})
        if self.later_chance(0.25, "cel-environment"):
            feature, expr = self.later.choice(LATER_SELECTORS)
            self.features.add(feature)
            out.append({"cel": {"expression": expr}})
        if self.later_chance(0.2, "cel-renamed"):
            feature, expr = self.later.choice(RENAMED_SELECTORS)
            self.features.add(feature)
            out.append({"cel": {"expression": expr}})
        if self.formats.random() < 0.12:
            feature, expr = self.formats.choice(FORMAT_SELECTORS)
            self.features.add(feature)
            out.append({"cel": {"expression": expr}})
        if self.format_library.random() < 0.1:
            feature, expr = self.format_library.choice(FORMAT_LIBRARY_SELECTORS)
            self.features.add(feature)
            out.append({"cel": {"expression": expr}})
        return out

    def exact(self, cls: str) -> dict[str, Any]:
        r = self.r
        req: dict[str, Any] = {"deviceClassName": cls, "selectors": self.selectors()}
        if self.chance(0.2, "all-mode"):
            req["allocationMode"] = "All"
        else:
            req["allocationMode"] = "ExactCount"
            req["count"] = r.choice((1, 1, 2, 3))
        if self.chance(0.15, "capacity-requests"):
            req["capacity"] = {
                "requests": {self.capacity_name(): r.choice(("4Gi", "6Gi", "8Gi", "12Gi"))}
            }
        if self.chance(0.08, "admin-access"):
            req["adminAccess"] = True
        if self.chance(0.25, "tolerations"):
            req["tolerations"] = [
                r.choice(
                    (
                        {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"},
                        {"key": "k", "operator": "Exists"},
                        {"operator": "Exists", "effect": "NoExecute"},
                    )
                )
            ]
        if not req["selectors"]:
            del req["selectors"]
        return req

    def claim(self, name: str, classes: list[str]) -> dict[str, Any]:
        r = self.r
        requests: list[dict[str, Any]] = []
        names: list[str] = []
        for i in range(r.choice((1, 1, 2, 3))):
            rn = f"r{i}"
            if self.chance(0.3, "first-available"):
                subs: list[dict[str, Any]] = []
                for j in range(r.choice((2, 3))):
                    subs.append({"name": f"s{j}", **self.exact(r.choice(classes))})
                    names.append(f"{rn}/s{j}")
                requests.append({"name": rn, "firstAvailable": subs})
            else:
                requests.append({"name": rn, "exactly": self.exact(r.choice(classes))})
            names.append(rn)
        constraints = []
        if self.chance(0.4, "constraints"):
            for _ in range(r.choice((1, 1, 2))):
                con: dict[str, Any] = {}
                if r.random() < 0.5 and len(names) > 1:
                    listed = r.sample(names, r.randint(1, min(3, len(names))))
                    con["requests"] = sorted(set(listed))
                    if any("/" in n for n in listed):
                        self.features.add("constraints-over-subrequests")
                if r.random() < 0.65:
                    con["matchAttribute"] = r.choice(MATCH_ATTRS)
                else:
                    con["distinctAttribute"] = r.choice(DISTINCT_ATTRS)
                    self.features.add("distinct-attribute")
                constraints.append(con)
        devices: dict[str, Any] = {"requests": requests}
        if constraints:
            devices["constraints"] = constraints
        return {
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"devices": devices},
        }

    def existing(self, name: str) -> dict[str, Any] | None:
        if not self.devices:
            return None
        r = self.r
        results = []
        for i, (driver, pool, dev, raw) in enumerate(
            r.sample(self.devices, min(len(self.devices), r.randint(1, 3)))
        ):
            res: dict[str, Any] = {
                "request": f"r{i}",
                "driver": driver,
                "pool": pool,
                "device": dev,
            }
            if raw.get("allowMultipleAllocations"):
                res["shareID"] = f"00000000-0000-0000-0000-00000000000{i}"
                # Mostly the name the device wrote; sometimes the other spelling, which the
                # allocator then counts against nothing.
                written = next(iter(raw.get("capacity") or {"memory": None}))
                if self.later_chance(0.2, "qualified-capacity"):
                    written = self.capacity_name()
                res["consumedCapacity"] = {written: r.choice(("4Gi", "8Gi", "16Gi"))}
            elif self.chance(0.1, "admin-access"):
                res["adminAccess"] = True
            results.append(res)
        return {
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": results}}},
        }


def scenario(
    seed: int, release: str = "1.37", group_shapes: bool = False
) -> tuple[dict[str, Any], set[str]]:
    """One scenario and the features it exercises, for the allocator of ``release``: the
    capacity edges of v1.37's range arithmetic only for ``1.37`` (v1.36 wraps in 64 bits,
    which the engine does not follow); ``group_shapes``: compatibility groups in every shape
    for an allocator that enforces them (the draws of the other features stay the same)."""
    g = _Gen(seed)
    r = g.r
    nodes = [
        {"metadata": {"name": "n0", "labels": {"zone": "a", "kubernetes.io/hostname": "n0"}}},
        {"metadata": {"name": "n1", "labels": {"zone": "b", "kubernetes.io/hostname": "n1"}}},
    ]
    slices: list[dict[str, Any]] = []
    for n in ("n0", "n1"):
        slices += g.pool(f"pool-{n}", {"nodeName": n}, r.randint(1, 6))
    if g.chance(0.3, "node-selection"):
        sel = r.choice(
            (
                {"allNodes": True},
                {
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "In", "values": ["a"]}
                                ]
                            }
                        ]
                    }
                },
                {"perDeviceNodeSelection": True},
            )
        )
        slices += g.pool("shared", sel, r.randint(1, 4))
    if g.chance(0.05, "limits"):
        slices += g.pool("big", {"nodeName": "n0"}, r.choice((32, 33)), driver=NIC)
    classes: list[dict[str, Any]] = [
        {
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
        {"metadata": {"name": "any"}, "spec": {}},
        {
            "metadata": {"name": "big"},
            "spec": {
                "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}" && {BIG}'}}]
            },
        },
        {
            "metadata": {"name": "nic"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NIC}"'}}]},
        },
    ]
    if g.chance(0.3, "class-selectors"):
        _, expr = r.choice(SELECTORS)
        classes[1]["spec"] = {
            "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}" && ({expr})'}}]
        }
    allocated = []
    if g.chance(0.4, "existing-allocations"):
        for i in range(r.randint(1, 2)):
            c = g.existing(f"old-{i}")
            if c is not None:
                allocated.append(c)
    names = ["gpu", "gpu", "any", "big"] + (
        ["nic"] if any(s["spec"]["driver"] == NIC for s in slices) else []
    )
    claims = [g.claim(f"c{i}", names) for i in range(r.randint(1, 3))]
    # Features added later draw from g.later (and from g.r only after everything above), so the
    # scenario above stays the same seed for seed.
    if g.later.random() < 0.3:  # more claims, for pods of several
        claims += [g.claim(f"c{len(claims) + i}", names) for i in range(g.later.randint(1, 2))]
    pools: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for s in slices:
        if s["spec"].get("devices"):
            pools.setdefault((s["spec"]["driver"], s["spec"]["pool"]["name"]), []).append(s)
    for group in pools.values():
        if g.later_chance(0.15, "binding-conditions"):
            g.bind(g.later.choice(group)["spec"]["devices"])
    if g.later_chance(0.2, "binding-conditions"):
        bound = g.pool("bound-n0", {"nodeName": "n0"}, g.later.randint(1, 2))
        for s in bound:
            if "devices" in s["spec"]:
                g.bind(s["spec"]["devices"])
        slices += bound
    g.taint_degraded(slices)
    if release == "1.37":
        g.capacity_edges(slices, claims)
    g.compatibility_groups(slices)
    pods = g.pods(len(claims))
    g.scheduler_edges(slices, claims, pods, allocated)
    if group_shapes:
        g.group_shapes(slices, allocated)
        if g.shapes.random() < 0.6:  # a pod that takes several plain devices: groups decide
            count = g.shapes.choice((2, 2, 3))
            claims.append(
                {
                    "metadata": {"name": "several", "namespace": "default", "uid": "uid-several"},
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": "r0",
                                    "exactly": {
                                        "deviceClassName": "any",
                                        "allocationMode": "ExactCount",
                                        "count": count,
                                    },
                                }
                            ]
                        }
                    },
                }
            )
            pods.append([len(claims) - 1])
    scen = {
        "slices": slices,
        "classes": classes,
        "allocated": allocated,
        "nodes": nodes,
        "claims": claims,
        "pods": pods,
    }
    return scen, g.features
