// Command allocator runs the DRA structured allocator that kube-scheduler uses
// (k8s.io/dynamic-resource-allocation/structured, with the feature set
// kube-scheduler hands it: features_137.go, or features_136.go for the
// compatibility build) on scenarios read from stdin, one JSON
// object per line, and writes one JSON result line per scenario.
//
// A scenario may group its claims into pods ("pods": lists of claim indices);
// the claims of a pod are allocated together in one Allocate call, as
// kube-scheduler's DRA plugin does for a pod's pending claims. Without "pods"
// every claim is a pod of its own.
//
// Modes:
//   - "pairs": every pod against every node, each on the scenario's
//     existing allocations only (nothing is committed); one row per claim
//     without "pods", one row per pod (with "allocations", one per claim)
//     with them;
//   - "plan": pods one after another; each is tried on the nodes in order,
//     starting where the previous pod's search stopped, until
//     maxFeasibleNodes nodes fit; the first fitting node is committed. An
//     error fails the pod (the scheduler's Filter returns an error status),
//     except one that only rules out the node (ErrFailedAllocationOnNode).
//     Per-pod seconds are reported (allocator setup included, as the
//     scheduler builds one allocator per pod), and the process's CPU seconds
//     over all pods (garbage collection included; bench/scheduler_allocator.py).
//
// "fatal" marks an error that fails the pod rather than only the node.
// "allocator -version" prints the Kubernetes release the binary was built from;
// "allocator -feature-gates Name=true,..." runs it with those gates set on top of
// the release's (features_*.go: setGate).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

type scenario struct {
	Mode             string                       `json:"mode"`
	Slices           []*resourceapi.ResourceSlice `json:"slices"`
	Classes          []*resourceapi.DeviceClass   `json:"classes"`
	Allocated        []*resourceapi.ResourceClaim `json:"allocated"`
	Nodes            []*v1.Node                   `json:"nodes"`
	Claims           []*resourceapi.ResourceClaim `json:"claims"`
	Pods             [][]int                      `json:"pods"`
	MaxFeasibleNodes int                          `json:"maxFeasibleNodes"`
}

type pairResult struct {
	OK          bool                           `json:"ok"`
	Error       string                         `json:"error,omitempty"`
	Fatal       bool                           `json:"fatal,omitempty"`
	Allocation  *resourceapi.AllocationResult  `json:"allocation,omitempty"`
	Allocations []resourceapi.AllocationResult `json:"allocations,omitempty"`
}

type placement struct {
	Node        string                         `json:"node,omitempty"`
	Error       string                         `json:"error,omitempty"`
	Seconds     float64                        `json:"seconds"`
	Allocation  *resourceapi.AllocationResult  `json:"allocation,omitempty"`
	Allocations []resourceapi.AllocationResult `json:"allocations,omitempty"`
}

type output struct {
	Pairs      [][]pairResult `json:"pairs,omitempty"`
	Placements []placement    `json:"placements,omitempty"`
	CPUSeconds float64        `json:"cpuSeconds,omitempty"`
	Error      string         `json:"error,omitempty"`
}

// cpuSeconds: the CPU time of the whole process (user and system, every
// thread: the garbage collector's too).
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

type classLister map[string]*resourceapi.DeviceClass

func (c classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(c))
	for _, v := range c {
		out = append(out, v)
	}
	return out, nil
}

func (c classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if v, ok := c[name]; ok {
		return v, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}, name)
}

// state is the scheduler's view of existing allocations: the same split as
// kube-scheduler's foreachAllocatedDevice (admin access is not counted;
// results with a share ID are shares with consumed capacity).
func newState() structured.AllocatedState {
	return structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
}

func record(s structured.AllocatedState, alloc *resourceapi.AllocationResult) {
	if alloc == nil {
		return
	}
	for _, r := range alloc.Devices.Results {
		if r.AdminAccess != nil && *r.AdminAccess {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID != nil {
			s.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
			if r.ConsumedCapacity != nil {
				s.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
			}
			continue
		}
		s.AllocatedDevices.Insert(id)
	}
}

// fatal: the error fails the pod in kube-scheduler (Filter returns an error
// status) rather than ruling out only this node.
func fatal(err error) bool {
	return err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode)
}

// pods: the scenario's claims grouped into pods (each claim alone without
// "pods"); an index out of range is an error.
func pods(sc *scenario) ([][]*resourceapi.ResourceClaim, error) {
	if sc.Pods == nil {
		out := make([][]*resourceapi.ResourceClaim, 0, len(sc.Claims))
		for _, c := range sc.Claims {
			out = append(out, []*resourceapi.ResourceClaim{c})
		}
		return out, nil
	}
	out := make([][]*resourceapi.ResourceClaim, 0, len(sc.Pods))
	for pi, indices := range sc.Pods {
		pod := make([]*resourceapi.ResourceClaim, 0, len(indices))
		for _, i := range indices {
			if i < 0 || i >= len(sc.Claims) {
				return nil, fmt.Errorf("pod %d: claim index %d out of range", pi, i)
			}
			pod = append(pod, sc.Claims[i])
		}
		out = append(out, pod)
	}
	return out, nil
}

func allocatePod(ctx context.Context, sc *scenario, classes classLister, cache *cel.Cache, state structured.AllocatedState, node *v1.Node, claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	a, err := structured.NewAllocator(ctx, features, state, classes, sc.Slices, cache)
	if err != nil {
		return nil, err
	}
	res, err := a.Allocate(ctx, node, claims)
	if err != nil || len(res) != len(claims) {
		return nil, err
	}
	return res, nil
}

func run(sc *scenario) (out output) {
	ctx := context.Background()
	cache := cel.NewCache(10, celFeatures)
	classes := classLister{}
	for _, c := range sc.Classes {
		classes[c.Name] = c
	}
	state := newState()
	for _, c := range sc.Allocated {
		record(state, c.Status.Allocation)
	}
	groups, err := pods(sc)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	switch sc.Mode {
	case "pairs":
		for _, pod := range groups {
			row := make([]pairResult, 0, len(sc.Nodes))
			for _, node := range sc.Nodes {
				res, err := allocatePod(ctx, sc, classes, cache, state, node, pod)
				r := pairResult{OK: res != nil}
				if res != nil {
					if sc.Pods == nil {
						r.Allocation = &res[0]
					} else {
						r.Allocations = res
					}
				}
				if err != nil {
					r.Error = err.Error()
					r.Fatal = fatal(err)
				}
				row = append(row, r)
			}
			out.Pairs = append(out.Pairs, row)
		}
	case "plan":
		maxFeasible := sc.MaxFeasibleNodes
		if maxFeasible <= 0 {
			maxFeasible = 1
		}
		start := 0
		cpu0 := cpuSeconds()
		for _, pod := range groups {
			t0 := time.Now()
			p := placement{}
			a, err := structured.NewAllocator(ctx, features, state, classes, sc.Slices, cache)
			if err != nil {
				p.Error = err.Error()
			} else {
				feasible := 0
				tried := 0
				for k := 0; k < len(sc.Nodes) && feasible < maxFeasible; k++ {
					node := sc.Nodes[(start+k)%len(sc.Nodes)]
					tried++
					res, err := a.Allocate(ctx, node, pod)
					if fatal(err) {
						p.Error = err.Error()
						p.Node, p.Allocations = "", nil
						break
					}
					if err == nil && len(res) == len(pod) {
						feasible++
						if p.Allocations == nil {
							p.Node = node.Name
							p.Allocations = res
						}
					}
				}
				start += tried
			}
			for i := range p.Allocations {
				record(state, &p.Allocations[i])
			}
			if sc.Pods == nil && len(p.Allocations) == 1 {
				p.Allocation, p.Allocations = &p.Allocations[0], nil
			}
			p.Seconds = time.Since(t0).Seconds()
			out.Placements = append(out.Placements, p)
		}
		out.CPUSeconds = cpuSeconds() - cpu0
	default:
		out.Error = fmt.Sprintf("unknown mode %q", sc.Mode)
	}
	return out
}

// parseGates applies "Name=true,Other=false" (kube-scheduler's syntax).
func parseGates(text string) error {
	for _, part := range strings.Split(text, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "=")
		if !ok || (value != "true" && value != "false") {
			return fmt.Errorf("feature gate %q is not NAME=true or NAME=false", part)
		}
		if err := setGate(name, value == "true"); err != nil {
			return err
		}
	}
	return nil
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-version" {
		fmt.Println(kubernetesVersion)
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "-feature-gates" {
		if err := parseGates(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "allocator:", err)
			os.Exit(2)
		}
	} else if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: allocator [-version | -feature-gates Name=true,...]")
		os.Exit(2)
	}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	enc := json.NewEncoder(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if len(line) > 0 {
			var sc scenario
			var out output
			if jerr := json.Unmarshal(line, &sc); jerr != nil {
				out.Error = "bad scenario: " + jerr.Error()
			} else {
				out = run(&sc)
			}
			if eerr := enc.Encode(out); eerr != nil {
				fmt.Fprintln(os.Stderr, "allocator:", eerr)
				os.Exit(1)
			}
		}
		if err != nil {
			return
		}
	}
}
