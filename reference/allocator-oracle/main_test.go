package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const driver = "gpu.example.com"

// gpuCase is one node n1 with a slice of `gpus` GPUs in pool n1, a second
// node n2 without devices, a class selecting the driver by CEL, and one
// claim default/train asking for `count` GPUs.
func gpuCase(gpus int, count int64) *Case {
	devices := make([]resourceapi.Device, gpus)
	for i := range devices {
		devices[i] = resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"model": {StringValue: ptr.To("A100")},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: resource.MustParse("80Gi")},
			},
		}
	}
	return &Case{
		Name: "gpus",
		Nodes: []corev1.Node{
			{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
			{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
		},
		ResourceSlices: []resourceapi.ResourceSlice{{
			ObjectMeta: metav1.ObjectMeta{Name: "n1-gpu"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   driver,
				Pool:     resourceapi.ResourcePool{Name: "n1", Generation: 1, ResourceSliceCount: 1},
				NodeName: ptr.To("n1"),
				Devices:  devices,
			},
		}},
		DeviceClasses: []resourceapi.DeviceClass{{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`},
			}}},
		}},
		Claims: []resourceapi.ResourceClaim{claim("train", resourceapi.ExactDeviceRequest{
			DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
		})},
	}
}

func claim(name string, request resourceapi.ExactDeviceRequest) resourceapi.ResourceClaim {
	return resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &request}},
		}},
	}
}

func allocatedClaim(name string, results ...resourceapi.DeviceRequestAllocationResult) resourceapi.ResourceClaim {
	c := claim(name, resourceapi.ExactDeviceRequest{DeviceClassName: "gpu"})
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	return c
}

func judge(t *testing.T, c *Case) Result {
	t.Helper()
	result := NewOracle().Judge(context.Background(), c)
	if result.Error != "" {
		t.Fatalf("case error: %s", result.Error)
	}
	if len(result.Nodes) != len(c.Nodes) {
		t.Fatalf("%d node verdicts for %d nodes", len(result.Nodes), len(c.Nodes))
	}
	for _, node := range result.Nodes {
		if node.Error != "" {
			t.Fatalf("node %s: allocator error: %s", node.Node, node.Error)
		}
	}
	return result
}

func devicesOf(node NodeResult) []string {
	var names []string
	for _, d := range node.Devices {
		names = append(names, d.Claim+":"+d.Request+"="+d.Driver+"/"+d.Pool+"/"+d.Device)
	}
	return names
}

func TestOneGPUFitsOnTheNodeWithTheSlice(t *testing.T) {
	result := judge(t, gpuCase(2, 1))
	if result.Allocator == "" {
		t.Errorf("allocator implementation not reported")
	}
	n1, n2 := result.Nodes[0], result.Nodes[1]
	if !n1.Fits || strings.Join(devicesOf(n1), ",") != "default/train:gpu=gpu.example.com/n1/gpu-0" {
		t.Errorf("n1: fits=%v devices=%v, want gpu-0", n1.Fits, devicesOf(n1))
	}
	if n2.Fits || len(n2.Devices) != 0 {
		t.Errorf("n2 has no devices but fits=%v devices=%v", n2.Fits, devicesOf(n2))
	}
}

func TestThreeGPUsDoNotFitOnTwo(t *testing.T) {
	for _, node := range judge(t, gpuCase(2, 3)).Nodes {
		if node.Fits || node.Error != "" || node.Reason != "" {
			t.Errorf("%s: fits=%v error=%q reason=%q, want a plain no-fit", node.Node, node.Fits, node.Error, node.Reason)
		}
	}
}

func TestDeviceTaintRuleAndToleration(t *testing.T) {
	c := gpuCase(2, 1)
	c.DeviceTaintRules = []resourceapi.DeviceTaintRule{{
		ObjectMeta: metav1.ObjectMeta{Name: "maintenance"},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(driver), Pool: ptr.To("n1")},
			Taint:          resourceapi.DeviceTaint{Key: "example.com/maintenance", Value: "yes", Effect: resourceapi.DeviceTaintEffectNoSchedule},
		},
	}}
	if judge(t, c).Nodes[0].Fits {
		t.Errorf("n1 fits although every device is tainted NoSchedule")
	}

	c.Claims[0].Spec.Devices.Requests[0].Exactly.Tolerations = []resourceapi.DeviceToleration{{
		Key: "example.com/maintenance", Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoSchedule,
	}}
	if !judge(t, c).Nodes[0].Fits {
		t.Errorf("n1 does not fit although the claim tolerates the taint")
	}

	// A rule for another device only taints that one.
	c = gpuCase(2, 1)
	c.DeviceTaintRules = []resourceapi.DeviceTaintRule{{
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Device: ptr.To("gpu-0")},
			Taint:          resourceapi.DeviceTaint{Key: "k", Effect: resourceapi.DeviceTaintEffectNoSchedule},
		},
	}}
	if got := devicesOf(judge(t, c).Nodes[0]); len(got) != 1 || !strings.HasSuffix(got[0], "/gpu-1") {
		t.Errorf("devices %v, want the untainted gpu-1", got)
	}

	// With the feature off, taints are not applied.
	c.Features = map[string]bool{"DRADeviceTaints": false}
	if got := devicesOf(judge(t, c).Nodes[0]); len(got) != 1 || !strings.HasSuffix(got[0], "/gpu-0") {
		t.Errorf("devices %v with DeviceTaints off, want gpu-0", got)
	}
}

func TestAllocatedClaimsHoldTheirDevices(t *testing.T) {
	c := gpuCase(2, 2)
	c.AllocatedClaims = []resourceapi.ResourceClaim{allocatedClaim("other", resourceapi.DeviceRequestAllocationResult{
		Request: "gpu", Driver: driver, Pool: "n1", Device: "gpu-0",
	})}
	if judge(t, c).Nodes[0].Fits {
		t.Errorf("two GPUs fit although one of two is allocated")
	}
	c.Claims[0].Spec.Devices.Requests[0].Exactly.Count = 1
	if got := devicesOf(judge(t, c).Nodes[0]); len(got) != 1 || !strings.HasSuffix(got[0], "/gpu-1") {
		t.Errorf("devices %v, want the free gpu-1", got)
	}

	// Admin access does not take the device (as in the scheduler).
	c = gpuCase(1, 1)
	c.AllocatedClaims = []resourceapi.ResourceClaim{allocatedClaim("admin", resourceapi.DeviceRequestAllocationResult{
		Request: "gpu", Driver: driver, Pool: "n1", Device: "gpu-0", AdminAccess: ptr.To(true),
	})}
	if !judge(t, c).Nodes[0].Fits {
		t.Errorf("a device held with admin access blocks a normal claim")
	}
}

func TestConsumedCapacityOfSharedDevices(t *testing.T) {
	c := gpuCase(1, 1)
	device := &c.ResourceSlices[0].Spec.Devices[0]
	device.AllowMultipleAllocations = ptr.To(true)
	device.Capacity["memory"] = resourceapi.DeviceCapacity{
		Value:         resource.MustParse("80Gi"),
		RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: ptr.To(resource.MustParse("10Gi"))},
	}
	shareID := types.UID("0a1b2c3d-0000-4000-8000-000000000001")
	c.AllocatedClaims = []resourceapi.ResourceClaim{allocatedClaim("sharer", resourceapi.DeviceRequestAllocationResult{
		Request: "gpu", Driver: driver, Pool: "n1", Device: "gpu-0", ShareID: &shareID,
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("60Gi")},
	})}
	ask := func(memory string) NodeResult {
		c.Claims[0].Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{
			Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)},
		}
		return judge(t, c).Nodes[0]
	}
	if node := ask("40Gi"); node.Fits {
		t.Errorf("40Gi fits although 60Gi of 80Gi are consumed")
	}
	node := ask("20Gi")
	if !node.Fits || len(node.Devices) != 1 || !node.Devices[0].Shared || node.Devices[0].ConsumedCapacity["memory"] != "20Gi" {
		t.Errorf("20Gi: fits=%v devices=%+v, want a 20Gi share of gpu-0", node.Fits, node.Devices)
	}
}

func TestPreallocatedClaimOfThePodPinsTheNode(t *testing.T) {
	c := gpuCase(2, 1)
	pinned := allocatedClaim("pinned", resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: driver, Pool: "n1", Device: "gpu-1"})
	pinned.Status.Allocation.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n2"}}},
	}}}
	c.Claims = append(c.Claims, pinned)
	result := judge(t, c)
	if result.Nodes[0].Fits || result.Nodes[0].Reason == "" {
		t.Errorf("n1: fits=%v reason=%q, want no fit because the allocated claim is pinned to n2", result.Nodes[0].Fits, result.Nodes[0].Reason)
	}
}

func TestAPIServerDefaultsAreApplied(t *testing.T) {
	// Neither allocationMode nor count: the API server makes that ExactCount 1.
	c := gpuCase(2, 0)
	c.Claims[0].Spec.Devices.Requests[0].Exactly.AllocationMode = ""
	if got := devicesOf(judge(t, c).Nodes[0]); len(got) != 1 {
		t.Errorf("devices %v, want one", got)
	}

	// A firstAvailable request without modes: "big" (count 3) cannot be had, "small" (count 1 by default) can.
	c.Claims[0].Spec.Devices.Requests[0] = resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "big", DeviceClassName: "gpu", Count: 3},
		{Name: "small", DeviceClassName: "gpu"},
	}}
	if got := devicesOf(judge(t, c).Nodes[0]); len(got) != 1 || !strings.Contains(got[0], ":gpu/small=") {
		t.Errorf("devices %v, want one for gpu/small", got)
	}
}

func TestFeatureOverrides(t *testing.T) {
	features, opts, err := resolveFeatures(map[string]bool{
		"draprioritizedlist": false, "DeviceBinding": false, "ListTypeAttributes": true, "DeviceTaintRules": false,
	})
	if err != nil {
		t.Fatal(err)
	}
	if features.PrioritizedList || features.DeviceBindingAndStatus || !features.ListTypeAttributes || !features.AdminAccess || opts.deviceTaintRules {
		t.Errorf("overrides not applied: %+v %+v", features, opts)
	}
	if _, _, err := resolveFeatures(map[string]bool{"NoSuchFeature": true}); err == nil {
		t.Errorf("unknown feature accepted")
	}
}

func TestRunLineProtocol(t *testing.T) {
	good, err := json.Marshal(gpuCase(2, 1))
	if err != nil {
		t.Fatal(err)
	}
	input := strings.Join([]string{
		string(good),
		`{"name": "cut", "nodes": [`,
		``,
		`{"name": "typo", "nodez": []}`,
		`{"name": "feature", "features": {"Bogus": true}}`,
	}, "\n")
	var out bytes.Buffer
	if err := run(context.Background(), NewOracle(), strings.NewReader(input), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d output lines for 4 cases (and one blank line):\n%s", len(lines), out.String())
	}
	var results []Result
	for _, line := range lines {
		var r Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("output %q: %v", line, err)
		}
		results = append(results, r)
	}
	if results[0].Name != "gpus" || results[0].Error != "" || !results[0].Nodes[0].Fits {
		t.Errorf("good case: %+v", results[0])
	}
	if results[1].Name != "cut" || !strings.HasPrefix(results[1].Error, "malformed case") {
		t.Errorf("cut line: %+v", results[1])
	}
	if results[2].Error != "" || len(results[2].Warnings) != 1 {
		t.Errorf("unknown field: %+v, want one warning", results[2])
	}
	if results[3].Name != "feature" || !strings.Contains(results[3].Error, "Bogus") {
		t.Errorf("bad feature: %+v", results[3])
	}
}

func TestSalvageName(t *testing.T) {
	for line, want := range map[string]string{
		`{"nodes": [{"name": "x"}], "name": "late", "claims": [`: "late",
		`{"a": 1, "b": {"name": "inner"}, "name": "outer"`:       "outer",
		`{"name": 3}`: "",
		`not json`:    "",
	} {
		if got := salvageName([]byte(line)); got != want {
			t.Errorf("salvageName(%s) = %q, want %q", line, got, want)
		}
	}
}
