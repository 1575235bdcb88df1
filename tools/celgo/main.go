// Package main is kube-scheduler's device selector CEL (cel-go with the Kubernetes
// libraries, k8s.io/dynamic-resource-allocation/cel) as a C shared library for the
// engine (kubeacc/engine/celgo.py), which loads it with ctypes for the selectors its
// own evaluator cannot finish. Nothing here interprets CEL: an expression is compiled
// and run by the same package, with the same environment, compile cache and runtime
// cost limit (resource.k8s.io's CELSelectorExpressionMaxCost) as the scheduler's
// allocator.
//
// Build: go build -buildmode=c-shared -o libkubeacc_cel.so . (CGO_ENABLED=1).
//
// C ABI (every returned string is the caller's to free with kubeacc_cel_free):
//
//	char *kubeacc_cel_version(void);
//	    {"abi": 1, "kubernetes": "v1.37.2"}
//	char *kubeacc_cel_match(char *expression, char *device);
//	    device: {"driver": "...", "allowMultipleAllocations": false,
//	             "attributes": {"<name>": {"string"|"int"|"bool"|"version": ...}},
//	             "capacity": {"<name>": {"value": "40Gi"}}}
//	    (names as a ResourceSlice writes them), returns {"match": true|false}, or
//	    {"error": "...", "compile": true|false} (compile: the expression did not compile).
//	void kubeacc_cel_free(char *);
package main

/*
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"encoding/json"
	"unsafe"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

// abi is the version of the C ABI above; the engine refuses a library with another.
const abi = 1

// kubernetesVersion: the release of the pinned modules (go.mod), whose CEL this is.
const kubernetesVersion = "v1.37.2"

// cache compiles each expression once, as the scheduler's allocator does, with the
// CEL features kube-scheduler v1.37.2 compiles selectors with.
var cache = cel.NewCache(4096, cel.Features{EnableConsumableCapacity: true})

type device struct {
	Driver                   string                                                    `json:"driver"`
	AllowMultipleAllocations *bool                                                     `json:"allowMultipleAllocations"`
	Attributes               map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes"`
	Capacity                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity  `json:"capacity"`
}

type result struct {
	Match   *bool  `json:"match,omitempty"`
	Error   string `json:"error,omitempty"`
	Compile bool   `json:"compile,omitempty"`
}

func answer(v any) *C.char {
	out, err := json.Marshal(v)
	if err != nil {
		out = []byte(`{"error": "encoding the result failed"}`)
	}
	return C.CString(string(out))
}

func match(expression, input string) result {
	var d device
	if err := json.Unmarshal([]byte(input), &d); err != nil {
		return result{Error: "device JSON: " + err.Error()}
	}
	compiled := cache.GetOrCompile(expression)
	if compiled.Error != nil {
		return result{Error: compiled.Error.Error(), Compile: true}
	}
	matched, _, err := compiled.DeviceMatches(context.Background(), cel.Device{
		Driver:                   d.Driver,
		AllowMultipleAllocations: d.AllowMultipleAllocations,
		Attributes:               d.Attributes,
		Capacity:                 d.Capacity,
	})
	if err != nil {
		return result{Error: err.Error()}
	}
	return result{Match: &matched}
}

//export kubeacc_cel_match
func kubeacc_cel_match(expression, input *C.char) *C.char {
	return answer(match(C.GoString(expression), C.GoString(input)))
}

//export kubeacc_cel_version
func kubeacc_cel_version() *C.char {
	return answer(map[string]any{"abi": abi, "kubernetes": kubernetesVersion})
}

//export kubeacc_cel_free
func kubeacc_cel_free(p *C.char) {
	C.free(unsafe.Pointer(p))
}

func main() {}
