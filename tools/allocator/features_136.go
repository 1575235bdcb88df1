//go:build k8s136

package main

import (
	"fmt"

	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// features: what kube-scheduler v1.36.3 enables by default (built with
// -tags k8s136 -modfile go-1.36.mod, the compatibility harness).
var features = structured.Features{
	AdminAccess:            true,
	PrioritizedList:        true,
	PartitionableDevices:   true,
	DeviceTaints:           true,
	DeviceBindingAndStatus: true,
	ConsumableCapacity:     true,
}

// celFeatures: the CEL environment kube-scheduler v1.36.3 compiles selectors with.
var celFeatures = cel.Features{EnableConsumableCapacity: true}

// kubernetesVersion names the release whose allocator this binary runs.
const kubernetesVersion = "v1.36.3"

// setGate: v1.36.3 has none of the gates the harness lanes vary on.
func setGate(name string, on bool) error {
	return fmt.Errorf("feature gate %q is not one this harness sets for %s", name, kubernetesVersion)
}
