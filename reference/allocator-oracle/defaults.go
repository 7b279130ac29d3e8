package main

import (
	resourceapi "k8s.io/api/resource/v1"
)

// defaultClaim applies the API server's defaults for resource.k8s.io/v1
// ResourceClaims (SetDefaults_ExactDeviceRequest, SetDefaults_DeviceSubRequest
// and the toleration operator default in Kubernetes' pkg/apis/resource/v1).
// Claims read from a cluster already have them; hand-built cases often leave
// them out, and the allocator itself rejects an empty allocationMode.
//
//   - allocationMode "" becomes ExactCount, and an ExactCount request with
//     count 0 gets count 1 (for "exactly" requests and firstAvailable
//     subrequests);
//   - a toleration without operator gets Equal (in requests, subrequests and
//     allocation results).
//
// The one other v1 default, a device taint's timeAdded (set to "now"), is
// not applied: the allocator does not read it.
func defaultClaim(claim *resourceapi.ResourceClaim) {
	for i := range claim.Spec.Devices.Requests {
		request := &claim.Spec.Devices.Requests[i]
		if exactly := request.Exactly; exactly != nil {
			exactly.AllocationMode, exactly.Count = defaultCount(exactly.AllocationMode, exactly.Count)
			defaultTolerations(exactly.Tolerations)
		}
		for j := range request.FirstAvailable {
			sub := &request.FirstAvailable[j]
			sub.AllocationMode, sub.Count = defaultCount(sub.AllocationMode, sub.Count)
			defaultTolerations(sub.Tolerations)
		}
	}
	if claim.Status.Allocation != nil {
		for i := range claim.Status.Allocation.Devices.Results {
			defaultTolerations(claim.Status.Allocation.Devices.Results[i].Tolerations)
		}
	}
}

func defaultCount(mode resourceapi.DeviceAllocationMode, count int64) (resourceapi.DeviceAllocationMode, int64) {
	if mode == "" {
		mode = resourceapi.DeviceAllocationModeExactCount
	}
	if mode == resourceapi.DeviceAllocationModeExactCount && count == 0 {
		count = 1
	}
	return mode, count
}

func defaultTolerations(tolerations []resourceapi.DeviceToleration) {
	for i := range tolerations {
		if tolerations[i].Operator == "" {
			tolerations[i].Operator = resourceapi.DeviceTolerationOpEqual
		}
	}
}
