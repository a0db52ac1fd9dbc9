"""Pure manifests: the TorchX AppDef, the Volcano job overlay, PV/PVC and cache records."""
