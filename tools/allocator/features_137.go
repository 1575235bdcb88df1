//go:build !k8s136

package main

import (
	"fmt"

	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// features: what kube-scheduler v1.37.2 hands the allocator with the testbed's
// main-lane gates (kubeacc/testbed/versions.py LANE_1_37 on top of the release's
// defaults). AdminAccess, PrioritizedList, DeviceTaints and ResourceClaimDeviceStatus
// are GA; DeviceBindingConditions, ConsumableCapacity and PartitionableDevices are
// beta and on. DRAFractionalCapacityRange is beta but on only from minimum
// compatibility version 1.37 (a v1.37 scheduler defaults to 1.36), so off; the alpha
// gates (ListTypeAttributes, OptionalNodeOperations, DerivedAttributes,
// DeviceCompatibilityGroups) are off.
var features = structured.Features{
	AdminAccess:             true,
	PrioritizedList:         true,
	PartitionableDevices:    true,
	DeviceTaints:            true,
	DeviceBindingAndStatus:  true,
	ConsumableCapacity:      true,
	FractionalCapacityRange: false,
	ListTypeAttributes:      false,
	OptionalNodeOperations:  false,
	DerivedAttributes:       false,
	CompatibilityGroups:     false,
}

// celFeatures: the CEL environment kube-scheduler v1.37.2 compiles selectors with.
var celFeatures = cel.Features{EnableConsumableCapacity: true}

// kubernetesVersion names the release whose allocator this binary runs.
const kubernetesVersion = "v1.37.2"

// setGate turns one of the gates the harness lanes vary on or off (the
// "-feature-gates" flag); the allocator variant is then picked as kube-scheduler
// picks it (with DRADeviceCompatibilityGroups on: experimental).
func setGate(name string, on bool) error {
	switch name {
	case "DRADeviceCompatibilityGroups":
		features.CompatibilityGroups = on
	default:
		return fmt.Errorf("feature gate %q is not one this harness sets", name)
	}
	return nil
}
