package main

import (
	resourceapi "k8s.io/api/resource/v1"
)

// applyDeviceTaintRules returns the slices with the taints of matching
// DeviceTaintRules appended to their devices, which is what the scheduler's
// allocator sees.
//
// In Kubernetes 1.37 the scheduler gets its slices from the ResourceSlice
// tracker (k8s.io/dynamic-resource-allocation/resourceslice/tracker,
// ListPatchedResourceSlices). The tracker only works on top of running
// ResourceSlice and DeviceTaintRule informers, and its patching function is
// unexported, so the oracle patches the slices itself with the same
// semantics:
//   - a rule without spec.deviceSelector matches no device;
//   - deviceSelector.driver, .pool and .device, where set, must equal the
//     slice's spec.driver, spec.pool.name and the device's name; unset
//     fields match anything (an empty selector matches every device);
//   - the rule's spec.taint is appended to the device's own taints, rules
//     in input order; nothing is deduplicated;
//   - slices that no rule touches are passed through unchanged, touched
//     ones are deep-copied first.
//
// DeviceTaintSelector has no deviceClassName or CEL selectors in
// resource.k8s.io/v1 (both tombstoned since 1.35), and the rule's status is
// not consulted, as in the tracker. The taint's effect (NoSchedule,
// NoExecute, None) and the claims' tolerations are left to the allocator.
func applyDeviceTaintRules(slices []*resourceapi.ResourceSlice, rules []resourceapi.DeviceTaintRule) []*resourceapi.ResourceSlice {
	if len(rules) == 0 {
		return slices
	}
	patched := make([]*resourceapi.ResourceSlice, len(slices))
	for i, slice := range slices {
		patched[i] = patchSlice(slice, rules)
	}
	return patched
}

func patchSlice(slice *resourceapi.ResourceSlice, rules []resourceapi.DeviceTaintRule) *resourceapi.ResourceSlice {
	out := slice
	for r := range rules {
		selector := rules[r].Spec.DeviceSelector
		if selector == nil {
			continue
		}
		if selector.Driver != nil && *selector.Driver != slice.Spec.Driver {
			continue
		}
		if selector.Pool != nil && *selector.Pool != slice.Spec.Pool.Name {
			continue
		}
		for d := range slice.Spec.Devices {
			if selector.Device != nil && *selector.Device != slice.Spec.Devices[d].Name {
				continue
			}
			if out == slice {
				out = slice.DeepCopy()
			}
			out.Spec.Devices[d].Taints = append(out.Spec.Devices[d].Taints, rules[r].Spec.Taint)
		}
	}
	return out
}
