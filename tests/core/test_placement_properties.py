"""Properties of the decision engine over arbitrary sequences of spawns, binds, failures and ends.

Every decision is held against a brute-force oracle that knows nothing of the inventory's
index: it recomputes each node's free CPU, memory, pod slots and GPUs from the objects the test
created and the reservations still outstanding, and picks the best whole-pod fit by the policy's
rank. The engine must find a placement exactly when the oracle does, on a node where the whole
pod fits, with the oracle's rank (ties between equal nodes may go either way).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.core.inventory import Inventory
from jupyter_gpuburst.core.placement import GPURequest, NoCapacity, Placement, Placer, Policy, Strategy
from jupyter_gpuburst.core.quantities import canonical

GPU = "nvidia.com/gpu"
USERS = ["ann", "bob", "cy"]
GROUPS = {"ann": {"physics"}, "bob": {"physics"}, "cy": set()}
USER_CAP = 5
GROUP_CAP = 7
RESOURCES = ("cpu", "memory", "pods", GPU)

# off-grid values on purpose: the index's grades must never hide a node that fits
cpu_values = st.sampled_from(["0", "100m", "500m", "900m", "1", "1100m", "1500m", "2", "2500m", "3", "4", "7", "8"])
memory_values = st.sampled_from(["0", "100Mi", "1Gi", "1500M", "2Gi", "3Gi", "3500Mi", "4Gi", "6Gi", "8Gi"])
node_shapes = st.fixed_dictionaries(
    {
        "gpus": st.integers(0, 8),
        "cpu": st.sampled_from(["2", "4", "6", "7500m", "8", "16"]),
        "memory": st.sampled_from(["4Gi", "6Gi", "8Gi", "15Gi", "16Gi", "32Gi"]),
        "pods": st.integers(1, 4),
    }
)


def make_node(name: str, shape: dict, cluster_id: str | None = None) -> dict:
    node = synthetic.node(name, {GPU: shape["gpus"]}, cluster_id=cluster_id)
    node["status"]["allocatable"].update(cpu=shape["cpu"], memory=shape["memory"], pods=str(shape["pods"]))
    return node


class Federation(RuleBasedStateMachine):
    """The hub's loop: decide+reserve, then the pod binds (or the spawn fails), later it ends."""

    def __init__(self):
        super().__init__()
        self.inventory = Inventory()
        self.allocatable: dict[str, dict[str, int]] = {}
        self.site_of: dict[str, str] = {}
        self.policy = Policy(strategy=Strategy.LOCAL_FIRST, user_donor_cap=USER_CAP, group_donor_caps={"physics": GROUP_CAP})
        self.placer = Placer(self.policy, self.inventory, ttl_s=30)
        self.pending: dict[str, tuple[Placement, GPURequest]] = {}
        self.running: dict[str, tuple[dict, dict[str, int]]] = {}
        self.now = 0.0
        self.counter = 0

    @rule(local=st.lists(node_shapes, min_size=1, max_size=4), donors=st.lists(node_shapes, max_size=2))
    @precondition(lambda self: not self.allocatable)
    def build(self, local, donors):
        for i, shape in enumerate(local):
            self._add_node(make_node(f"gpu-{i}", shape), "origin")
        for i, shape in enumerate(donors):
            self._add_node(make_node(f"liqo-d{i}", shape, cluster_id=f"d{i}"), f"d{i}")

    def _add_node(self, node, site):
        self.inventory.apply_node_event("ADDED", node)
        name = node["metadata"]["name"]
        alloc = node["status"]["allocatable"]
        self.allocatable[name] = {r: canonical(r, alloc[r]) for r in RESOURCES}
        self.site_of[name] = site

    # ---- the oracle --------------------------------------------------------------------------
    def _free(self, name: str) -> dict[str, int]:
        used = {r: 0 for r in RESOURCES}
        for pod, demand in self.running.values():
            if pod["spec"]["nodeName"] == name:
                for r in RESOURCES:
                    used[r] += demand.get(r, 0)
        for placement, _request in self.pending.values():
            if placement.held_node == name:
                for r in RESOURCES:
                    used[r] += placement.resources.get(r, 0)
        return {r: self.allocatable[name][r] - used[r] for r in RESOURCES}

    def _oracle(self, request: GPURequest, demand: dict[str, int]):
        """(rank, node) of the best whole-pod fit under local-first, or None."""
        held = {"user": 0, "group": 0}
        for placement, req in self.pending.values():
            if placement.is_donor:
                held["user"] += placement.count if req.user == request.user else 0
                held["group"] += placement.count if "physics" in req.groups else 0
        for pod, demand_ in self.running.values():
            if pod["metadata"]["labels"].get("gpuburst.jupyter.org/site") not in (None, "origin"):
                held["user"] += demand_[GPU] if pod["metadata"]["annotations"].get("gpuburst.jupyter.org/user") == request.user else 0
                held["group"] += demand_[GPU] if "physics" in pod["metadata"]["annotations"].get("gpuburst.jupyter.org/groups", "") else 0
        donors_allowed = held["user"] + request.count <= USER_CAP and (
            "physics" not in request.groups or held["group"] + request.count <= GROUP_CAP
        )
        for tier in (["origin"], sorted({s for s in self.site_of.values() if s != "origin"})):
            best = None
            for name, site in self.site_of.items():
                if site not in tier or (site != "origin" and not donors_allowed):
                    continue
                free = self._free(name)
                if all(free[r] >= demand.get(r, 0) for r in RESOURCES):
                    leftover = free[GPU] - request.count
                    loss = (1.0 if site != "origin" else 0.0) + leftover
                    rank = (loss, site)
                    if best is None or rank < best[0]:
                        best = (rank, name)
            if best is not None:
                return best
        return None

    # ---- the hub's steps -------------------------------------------------------------------
    @rule(user=st.sampled_from(USERS), count=st.integers(1, 4), cpu=cpu_values, memory=memory_values)
    @precondition(lambda self: bool(self.allocatable))
    def spawn(self, user, count, cpu, memory):
        self.counter += 1
        key = f"{user}/s{self.counter}"
        resources = {"cpu": canonical("cpu", cpu), "memory": canonical("memory", memory)}
        request = GPURequest(GPU, count, user, groups=frozenset(GROUPS[user]), resources=resources)
        demand = {**resources, GPU: count, "pods": 1}
        self.placer.reservations.expire(self.now)
        self._forget_expired()
        expected = self._oracle(request, demand)
        outcome = self.placer.place(key, request, self.now)
        if expected is None:
            assert isinstance(outcome, NoCapacity) and outcome.reason.startswith("No site can")
            return
        assert isinstance(outcome, Placement), (outcome, expected)
        self.pending[key] = (outcome, request)
        free_before = self._free(outcome.held_node)
        # the chosen node fits the whole pod (counting its own hold once) ...
        for r in RESOURCES:
            assert free_before[r] >= 0, (r, outcome)
        chosen_leftover = free_before[GPU]  # after its own hold: the GPUs it leaves free
        loss = (1.0 if outcome.is_donor else 0.0) + chosen_leftover
        # ... and ranks as well as the oracle's best
        assert (loss, outcome.site) == expected[0], (outcome, expected)

    def _forget_expired(self):
        for key in [k for k in self.pending if k not in self.placer.reservations]:
            del self.pending[key]

    @rule(data=st.data())
    @precondition(lambda self: bool(self.pending))
    def bind(self, data):
        key = data.draw(st.sampled_from(sorted(self.pending)))
        placement, request = self.pending.pop(key)
        pod = synthetic.pod(
            key.replace("/", "-"),
            node_name=placement.held_node,
            gpus={GPU: placement.count},
            site=placement.site,
            user=request.user,
            groups=sorted(request.groups),
        )
        pod["spec"]["containers"][0]["resources"]["requests"] = {
            "cpu": f"{request.resources['cpu']}m",
            "memory": str(request.resources["memory"]),
        }
        self.inventory.apply_pod_event("ADDED", pod)
        self.placer.release(key)
        self.running[key] = (pod, placement.resources)

    @rule(data=st.data())
    @precondition(lambda self: bool(self.pending))
    def fail(self, data):
        key = data.draw(st.sampled_from(sorted(self.pending)))
        self.pending.pop(key)
        self.placer.release(key)

    @rule(data=st.data())
    @precondition(lambda self: bool(self.running))
    def stop(self, data):
        key = data.draw(st.sampled_from(sorted(self.running)))
        self.inventory.apply_pod_event("DELETED", self.running.pop(key)[0])

    @rule(seconds=st.floats(0, 40))
    def time_passes(self, seconds):
        self.now += seconds
        self.placer.reservations.expire(self.now)
        self._forget_expired()

    # ---- what must always hold --------------------------------------------------------------
    @invariant()
    def never_overcommitted(self):
        snapshot = self.inventory.snapshot()
        for name, allocatable in self.allocatable.items():
            node = snapshot.nodes.get(name)
            for r in RESOURCES:
                used = (node.requested.get(r, 0) + node.reserved.get(r, 0)) if node else 0
                assert used <= allocatable[r], (name, r)
                assert used == allocatable[r] - self._free(name)[r], (name, r)

    @invariant()
    def caps_hold(self):
        snapshot = self.inventory.snapshot()
        for user in USERS:
            assert snapshot.donor_units("user", user) <= USER_CAP
        assert snapshot.donor_units("group", "physics") <= GROUP_CAP

    @invariant()
    def every_hold_belongs_to_a_reservation(self):
        assert self.inventory.holds() == len(self.placer.reservations) == len(self.pending)


Federation.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestFederation = Federation.TestCase
