"""Properties of the decision engine over arbitrary sequences of spawns, binds and deletions."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.core.inventory import Inventory
from jupyter_gpuburst.core.placement import GPURequest, NoCapacity, Placement, Placer, Policy, Strategy

GPU = "nvidia.com/gpu"
USERS = ["ann", "bob", "cy"]
GROUPS = {"ann": {"physics"}, "bob": {"physics"}, "cy": set()}
USER_CAP = 5
GROUP_CAP = 7


class Federation(RuleBasedStateMachine):
    """The hub's loop: decide+reserve, then the pod binds (or the spawn fails), later it ends."""

    def __init__(self):
        super().__init__()
        self.inventory = Inventory()
        self.allocatable: dict[str, int] = {}
        self.site_of: dict[str, str] = {}
        self.placer = Placer(
            Policy(strategy=Strategy.LOCAL_FIRST, user_donor_cap=USER_CAP, group_donor_caps={"physics": GROUP_CAP}),
            ttl_s=30,
        )
        self.pending: dict[str, tuple[Placement, GPURequest]] = {}
        self.running: dict[str, dict] = {}
        self.now = 0.0
        self.counter = 0

    @rule(gpus=st.lists(st.integers(0, 8), min_size=1, max_size=3), donors=st.lists(st.integers(0, 12), max_size=2))
    @precondition(lambda self: not self.allocatable)
    def build(self, gpus, donors):
        for i, n in enumerate(gpus):
            self._add_node(synthetic.node(f"gpu-{i}", {GPU: n}), n, "origin")
        for i, n in enumerate(donors):
            self._add_node(synthetic.node(f"liqo-d{i}", {GPU: n}, cluster_id=f"d{i}"), n, f"d{i}")

    def _add_node(self, node, gpus, site):
        self.inventory.apply_node_event("ADDED", node)
        self.allocatable[node["metadata"]["name"]] = gpus
        self.site_of[node["metadata"]["name"]] = site

    @rule(user=st.sampled_from(USERS), count=st.integers(1, 4))
    @precondition(lambda self: bool(self.allocatable))
    def spawn(self, user, count):
        self.counter += 1
        key = f"{user}/s{self.counter}"
        request = GPURequest(GPU, count, user, groups=frozenset(GROUPS[user]))
        snapshot = self.inventory.snapshot()
        outcome = self.placer.place(key, request, snapshot, self.now)
        if isinstance(outcome, Placement):
            if outcome.is_donor:
                # local-first: a donor only when no local node fits after reservations
                for node in snapshot.nodes.values():
                    if node.site == "origin":
                        assert node.free(GPU) - self.placer.reservations.on_node(node.name, GPU) < count
            self.pending[key] = (outcome, request)
        else:
            assert isinstance(outcome, NoCapacity) and outcome.reason

    @rule(data=st.data())
    @precondition(lambda self: bool(self.pending))
    def bind(self, data):
        key = data.draw(st.sampled_from(sorted(self.pending)))
        placement, request = self.pending.pop(key)
        pod = synthetic.pod(
            key.replace("/", "-"), node_name=placement.node, gpus={GPU: placement.count},
            site=placement.site, user=request.user, groups=sorted(request.groups),
        )
        self.inventory.apply_pod_event("ADDED", pod)
        self.placer.release(key)
        self.running[key] = pod

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
        self.inventory.apply_pod_event("DELETED", self.running.pop(key))

    @rule(seconds=st.floats(0, 40))
    def time_passes(self, seconds):
        self.now += seconds
        for expired in self.placer.reservations.expire(self.now):
            self.pending.pop(expired.key, None)

    @invariant()
    def never_overcommitted(self):
        snapshot = self.inventory.snapshot()
        for name, allocatable in self.allocatable.items():
            node = snapshot.nodes.get(name)
            used = node.requested.get(GPU, 0) if node else 0
            assert used + self.placer.reservations.on_node(name, GPU) <= allocatable, name

    @invariant()
    def caps_hold(self):
        snapshot = self.inventory.snapshot()
        r = self.placer.reservations
        for user in USERS:
            assert snapshot.donor_units("user", user) + r.donor_units("user", user) <= USER_CAP
        assert snapshot.donor_units("group", "physics") + r.donor_units("group", "physics") <= GROUP_CAP


Federation.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestFederation = Federation.TestCase
