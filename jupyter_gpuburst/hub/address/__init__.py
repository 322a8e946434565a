"""The hub's address in the user namespace, the same name on the origin and on every donor.

A user server calls the hub at ``hub_connect_url``. A server placed on a donor runs in the donor's
copy of the user namespace (``jhub-users-<origin cluster id>``) and resolves names with the
donor's DNS, where the hub's own Service (``hub`` in ``jhub``) does not exist: ``jhub`` is never
offloaded, since it holds z2jh's ``hub`` Secret. Liqo does reflect the Services and
EndpointSlices of an offloaded namespace, keeping their names, with the endpoints' addresses
remapped so that the donor reaches them. So the hub keeps a Service ``hub`` without a selector in
the user namespace, and an EndpointSlice that points at its own pod (its IP from the downward
API): ``http://hub:8081`` then resolves in the user namespace on both sides, and in the hub's
own namespace (the proxy's) to z2jh's ``hub`` Service, the same pod.
"""

from jupyter_gpuburst.hub.address.keeper import AddressKeeper, HubAddress, start_with_hub
from jupyter_gpuburst.hub.address.manifests import endpoint_slice, service

__all__ = ["AddressKeeper", "HubAddress", "endpoint_slice", "service", "start_with_hub"]
