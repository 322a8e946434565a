"""A site on the real control plane feeds its node agents from an informer cache
(``sim/kube/site.py``'s ``CACHED``): every type the kubelet reads there must be cached, or the
read raises. The kubelet's Service names read EndpointSlices, which the cache lacked: every pod
change on the real control plane then raised KeyError in the hosts file's refresh, and no pod's
Service names were written."""

from __future__ import annotations

from jupyter_gpuburst.sim.kube.pki import Pki
from jupyter_gpuburst.sim.kube.remotestore import RemoteStore
from jupyter_gpuburst.sim.kube.site import CACHED
from jupyter_gpuburst.sim.kubelet import servicenames


async def test_the_kubelets_service_names_read_only_what_the_kube_sites_cache_holds(tmp_path):
    pki = Pki(tmp_path)
    admin = pki.client("admin", "admin", ("system:masters",))
    # never started: nothing is fetched, the cache is empty, and reads are answered from it
    store = RemoteStore("https://127.0.0.1:9", (str(pki.ca), str(admin.cert), str(admin.key)), CACHED)
    try:
        assert servicenames.addresses(store) == []
        store.watch(servicenames.ENDPOINTSLICES).close()
    finally:
        await store.stop()
