package main

// The oracle proper: one case in, one verdict per node out. main.go only
// moves JSON lines between stdin and stdout.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
	sigsjson "sigs.k8s.io/json"
)

// Case is one input line: the cluster state one pending Pod is scheduled
// against. Every object has the ordinary Kubernetes JSON shape.
type Case struct {
	Name             string                        `json:"name"`
	Nodes            []corev1.Node                 `json:"nodes"`
	ResourceSlices   []resourceapi.ResourceSlice   `json:"resourceSlices"`
	DeviceClasses    []resourceapi.DeviceClass     `json:"deviceClasses"`
	DeviceTaintRules []resourceapi.DeviceTaintRule `json:"deviceTaintRules"`
	// AllocatedClaims are the other claims in the cluster; those with
	// status.allocation hold their devices (or shares of them).
	AllocatedClaims []resourceapi.ResourceClaim `json:"allocatedClaims"`
	// Claims are the pending Pod's claims, in the Pod's order.
	Claims []resourceapi.ResourceClaim `json:"claims"`
	// Features overrides the defaults (see featureKeys).
	Features map[string]bool `json:"features"`
}

// Result is one output line.
type Result struct {
	Name string `json:"name"`
	// Allocator is the implementation NewAllocator picked for the feature
	// set ("stable", "incubating" or "experimental").
	Allocator string       `json:"allocator,omitempty"`
	Nodes     []NodeResult `json:"nodes"`
	// Error is set when the case could not be judged at all (malformed
	// line, bad feature name, NewAllocator failed); Nodes is then empty.
	Error string `json:"error"`
	// Warnings lists unknown or duplicated fields in the input objects.
	// The case was still judged, with those fields ignored.
	Warnings []string `json:"warnings,omitempty"`
}

// NodeResult is the verdict for one node.
type NodeResult struct {
	Node string `json:"node"`
	Fits bool   `json:"fits"`
	// Devices are the devices the allocator picked for the Pod's claims
	// that were not allocated yet, claim by claim in the Pod's order.
	Devices []DeviceResult `json:"devices"`
	// Reason explains a "does not fit" that came with a message: an
	// allocator error wrapping structured.ErrFailedAllocationOnNode (the
	// scheduler treats those as "unschedulable on this node", not as a
	// failure), or an already allocated claim of the Pod whose allocation
	// is not available on this node.
	Reason string `json:"reason,omitempty"`
	// Error is an allocator error (Allocate returned a non-nil error that
	// is not node-specific); Fits is then false.
	Error string `json:"error"`
}

// DeviceResult is one entry of an allocation result.
type DeviceResult struct {
	Claim                    string            `json:"claim"`
	Request                  string            `json:"request"`
	Driver                   string            `json:"driver"`
	Pool                     string            `json:"pool"`
	Device                   string            `json:"device"`
	AdminAccess              bool              `json:"adminAccess,omitempty"`
	Shared                   bool              `json:"shared,omitempty"`
	ConsumedCapacity         map[string]string `json:"consumedCapacity,omitempty"`
	BindingConditions        []string          `json:"bindingConditions,omitempty"`
	BindingFailureConditions []string          `json:"bindingFailureConditions,omitempty"`
}

// DefaultFeatures are the allocator features whose Kubernetes feature gates
// are on by default in 1.37: DRAAdminAccess (GA), DRAPrioritizedList (GA),
// DRAPartitionableDevices (beta), DRADeviceTaints (GA), DRAConsumableCapacity
// (beta), DRADeviceBindingConditions (beta) + DRAResourceClaimDeviceStatus
// (GA), DRAFractionalCapacityRange (beta). The alpha ones
// (CompatibilityGroups, DerivedAttributes, ListTypeAttributes,
// OptionalNodeOperations) stay off unless a case turns them on.
// DRAExtendedResource (GA) has no allocator field: it is scheduler-side
// (it turns extended resource requests into a special claim).
var DefaultFeatures = structured.Features{
	AdminAccess:             true,
	ConsumableCapacity:      true,
	DeviceBindingAndStatus:  true,
	DeviceTaints:            true,
	FractionalCapacityRange: true,
	PartitionableDevices:    true,
	PrioritizedList:         true,
}

// options are the oracle's own switches, set through the same "features"
// object as the allocator features.
type options struct {
	// deviceTaintRules corresponds to the DRADeviceTaintRules gate (GA,
	// on by default in 1.37): whether DeviceTaintRules are patched into the
	// slices. They only matter when the allocator's DeviceTaints is on.
	deviceTaintRules bool
}

// featureAliases maps feature-gate spellings that are not just
// "DRA" + field name to a Features field.
var featureAliases = map[string]string{
	"devicebinding":                "DeviceBindingAndStatus",
	"devicebindingconditions":      "DeviceBindingAndStatus",
	"dradevicebindingconditions":   "DeviceBindingAndStatus",
	"bindingconditions":            "DeviceBindingAndStatus",
	"resourceclaimdevicestatus":    "DeviceBindingAndStatus",
	"draresourceclaimdevicestatus": "DeviceBindingAndStatus",
	"devicecompatibilitygroups":    "CompatibilityGroups",
	"dradevicecompatibilitygroups": "CompatibilityGroups",
}

// resolveFeatures applies a case's overrides to DefaultFeatures. A key is a
// Features field name ("DeviceTaints"), the feature gate name
// ("DRADeviceTaints") or one of featureAliases, case-insensitively;
// "DeviceTaintRules"/"DRADeviceTaintRules" is the oracle's own switch.
func resolveFeatures(overrides map[string]bool) (structured.Features, options, error) {
	features := DefaultFeatures
	opts := options{deviceTaintRules: true}
	value := reflect.ValueOf(&features).Elem()
	fields := map[string]string{}
	for i := 0; i < value.NumField(); i++ {
		name := value.Type().Field(i).Name
		fields[strings.ToLower(name)] = name
		fields["dra"+strings.ToLower(name)] = name
	}
	keys := make([]string, 0, len(overrides))
	for key := range overrides {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		lower := strings.ToLower(key)
		if lower == "devicetaintrules" || lower == "dradevicetaintrules" {
			opts.deviceTaintRules = overrides[key]
			continue
		}
		field, ok := fields[lower]
		if !ok {
			field, ok = featureAliases[lower]
		}
		if !ok {
			return features, opts, fmt.Errorf("unknown feature %q (known: %s, DeviceTaintRules)", key, strings.Join(featureNames(), ", "))
		}
		value.FieldByName(field).SetBool(overrides[key])
	}
	return features, opts, nil
}

func featureNames() []string {
	t := reflect.TypeOf(structured.Features{})
	names := make([]string, 0, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		names = append(names, t.Field(i).Name)
	}
	return names
}

// Oracle judges cases. It keeps one CEL cache per CEL feature set so that
// compiled selectors are shared across cases. Not safe for concurrent use.
type Oracle struct {
	// Timeout bounds one Allocate call, like the scheduler's filter
	// timeout (DRASchedulerFilterTimeout, 10s by default). Zero: no bound.
	Timeout   time.Duration
	celCaches map[cel.Features]*cel.Cache
}

// NewOracle returns an Oracle with the scheduler's default filter timeout.
func NewOracle() *Oracle {
	return &Oracle{Timeout: 10 * time.Second, celCaches: map[cel.Features]*cel.Cache{}}
}

func (o *Oracle) celCache(features structured.Features) *cel.Cache {
	key := cel.Features{
		EnableConsumableCapacity: features.ConsumableCapacity,
		EnableListTypeAttributes: features.ListTypeAttributes,
	}
	cache, ok := o.celCaches[key]
	if !ok {
		cache = cel.NewCache(1000, key)
		o.celCaches[key] = cache
	}
	return cache
}

// JudgeLine decodes one input line and judges it. It never fails: problems
// are reported in the Result.
func (o *Oracle) JudgeLine(ctx context.Context, line []byte) Result {
	var c Case
	strictErrs, err := sigsjson.UnmarshalStrict(line, &c, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return Result{Name: salvageName(line), Nodes: []NodeResult{}, Error: "malformed case: " + err.Error()}
	}
	result := o.Judge(ctx, &c)
	for _, strictErr := range strictErrs {
		result.Warnings = append(result.Warnings, strictErr.Error())
	}
	return result
}

// salvageName finds the top-level "name" of a line that does not decode,
// reading JSON tokens up to the first syntax error. "" if there is none.
func salvageName(line []byte) string {
	decoder := json.NewDecoder(bytes.NewReader(line))
	if token, err := decoder.Token(); err != nil || token != json.Delim('{') {
		return ""
	}
	depth := 1
	expectKey := true
	for depth > 0 {
		token, err := decoder.Token()
		if err != nil {
			return ""
		}
		switch token := token.(type) {
		case json.Delim:
			if token == '{' || token == '[' {
				depth++
			} else {
				depth--
			}
			if depth == 1 {
				expectKey = true
			}
		case string:
			if depth == 1 && expectKey && token == "name" {
				if value, err := decoder.Token(); err == nil {
					if name, ok := value.(string); ok {
						return name
					}
				}
				return ""
			}
			if depth == 1 {
				expectKey = !expectKey
			}
		default:
			if depth == 1 {
				expectKey = true
			}
		}
	}
	return ""
}

// Judge runs the allocator for every node of the case. It applies the API
// server's defaults to the case's claims in place.
func (o *Oracle) Judge(ctx context.Context, c *Case) Result {
	result := Result{Name: c.Name, Nodes: []NodeResult{}}
	features, opts, err := resolveFeatures(c.Features)
	if err != nil {
		result.Error = err.Error()
		return result
	}

	slices := make([]*resourceapi.ResourceSlice, len(c.ResourceSlices))
	for i := range c.ResourceSlices {
		slices[i] = &c.ResourceSlices[i]
	}
	if features.DeviceTaints && opts.deviceTaintRules {
		slices = applyDeviceTaintRules(slices, c.DeviceTaintRules)
	}

	classes := newClassLister(c.DeviceClasses)

	for i := range c.Claims {
		defaultClaim(&c.Claims[i])
	}
	for i := range c.AllocatedClaims {
		defaultClaim(&c.AllocatedClaims[i])
	}

	// The scheduler's allocated state covers every allocated claim in the
	// cluster, the Pod's own allocated claims included.
	var toAllocate, preAllocated []*resourceapi.ResourceClaim
	for i := range c.Claims {
		if c.Claims[i].Status.Allocation == nil {
			toAllocate = append(toAllocate, &c.Claims[i])
		} else {
			preAllocated = append(preAllocated, &c.Claims[i])
		}
	}
	allocatedClaims := make([]*resourceapi.ResourceClaim, 0, len(c.AllocatedClaims)+len(preAllocated))
	for i := range c.AllocatedClaims {
		allocatedClaims = append(allocatedClaims, &c.AllocatedClaims[i])
	}
	allocatedClaims = append(allocatedClaims, preAllocated...)
	state := allocatedState(allocatedClaims, features.ConsumableCapacity)

	allocator, err := structured.NewAllocator(ctx, features, state, classes, slices, o.celCache(features))
	if err != nil {
		result.Error = "create allocator: " + err.Error()
		return result
	}
	result.Allocator = allocatorChannel(allocator)

	for i := range c.Nodes {
		result.Nodes = append(result.Nodes, o.judgeNode(ctx, features, allocator, &c.Nodes[i], toAllocate, preAllocated))
	}
	return result
}

func (o *Oracle) judgeNode(ctx context.Context, features structured.Features, allocator structured.Allocator,
	node *corev1.Node, toAllocate, preAllocated []*resourceapi.ResourceClaim) NodeResult {
	verdict := NodeResult{Node: node.Name, Devices: []DeviceResult{}}

	// Like the scheduler's Filter: a claim that is already allocated
	// restricts the Pod to the nodes its allocation is available on.
	for _, claim := range preAllocated {
		selector := claim.Status.Allocation.NodeSelector
		if selector == nil {
			continue
		}
		matches, err := structured.NodeMatches(features, node, "", false, selector)
		if err != nil {
			verdict.Error = fmt.Sprintf("claim %s: node selector of allocation: %v", claimKey(claim), err)
			return verdict
		}
		if !matches {
			verdict.Reason = fmt.Sprintf("claim %s is allocated to devices that are not available on node %s", claimKey(claim), node.Name)
			return verdict
		}
	}
	if len(toAllocate) == 0 {
		verdict.Fits = true
		return verdict
	}

	allocCtx := ctx
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		allocCtx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	results, err := allocator.Allocate(allocCtx, node, toAllocate)
	switch {
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		verdict.Reason = err.Error()
		return verdict
	case err != nil:
		verdict.Error = err.Error()
		return verdict
	case results == nil:
		return verdict
	case len(results) != len(toAllocate):
		verdict.Error = fmt.Sprintf("internal error: %d allocation results for %d claims", len(results), len(toAllocate))
		return verdict
	}
	verdict.Fits = true
	for i, allocation := range results {
		for _, r := range allocation.Devices.Results {
			device := DeviceResult{
				Claim:                    claimKey(toAllocate[i]),
				Request:                  r.Request,
				Driver:                   r.Driver,
				Pool:                     r.Pool,
				Device:                   r.Device,
				AdminAccess:              ptr.Deref(r.AdminAccess, false),
				Shared:                   r.ShareID != nil,
				BindingConditions:        r.BindingConditions,
				BindingFailureConditions: r.BindingFailureConditions,
			}
			if len(r.ConsumedCapacity) > 0 {
				device.ConsumedCapacity = make(map[string]string, len(r.ConsumedCapacity))
				for name, quantity := range r.ConsumedCapacity {
					device.ConsumedCapacity[string(name)] = quantity.String()
				}
			}
			verdict.Devices = append(verdict.Devices, device)
		}
	}
	return verdict
}

func claimKey(claim *resourceapi.ResourceClaim) string {
	return claim.Namespace + "/" + claim.Name
}

// allocatorChannel names the implementation behind the Allocator interface
// ("*incubating.Allocator" gives "incubating").
func allocatorChannel(allocator structured.Allocator) string {
	name := reflect.TypeOf(allocator).String()
	name = strings.TrimPrefix(name, "*")
	if pkg, _, ok := strings.Cut(name, "."); ok {
		return pkg
	}
	return name
}

// allocatedState builds the allocator's view of devices in use the way the
// kube-scheduler's dynamicresources plugin does (foreachAllocatedDevice in
// allocateddevices.go, gathered by the claim tracker's GatherAllocatedState):
// for every result of every allocated claim,
//   - a result with adminAccess: true is skipped (admin access does not
//     take a device);
//   - with DRAConsumableCapacity on and a shareID set: the shared device ID
//     (driver, pool, device, shareID) goes into AllocatedSharedDeviceIDs and
//     its consumedCapacity, if any, is added to AggregatedCapacity;
//   - otherwise the device ID goes into AllocatedDevices.
func allocatedState(claims []*resourceapi.ResourceClaim, consumableCapacity bool) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if ptr.Deref(r.AdminAccess, false) {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if consumableCapacity && r.ShareID != nil {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
				if r.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
				}
				continue
			}
			state.AllocatedDevices.Insert(id)
		}
	}
	return state
}

// classLister serves the case's DeviceClasses in input order, like an
// informer lister (Get of an unknown class is a NotFound API error).
type classLister struct {
	all    []*resourceapi.DeviceClass
	byName map[string]*resourceapi.DeviceClass
}

func newClassLister(classes []resourceapi.DeviceClass) *classLister {
	l := &classLister{byName: make(map[string]*resourceapi.DeviceClass, len(classes))}
	for i := range classes {
		l.all = append(l.all, &classes[i])
		l.byName[classes[i].Name] = &classes[i]
	}
	return l
}

func (l *classLister) List() ([]*resourceapi.DeviceClass, error) {
	return l.all, nil
}

func (l *classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if class, ok := l.byName[name]; ok {
		return class, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}
