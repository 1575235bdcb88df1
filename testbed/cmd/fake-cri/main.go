// Command fake-cri serves the upstream in-memory CRI runtime (k8s.io/cri-client/pkg/fake) on a
// unix socket so that a real kubelet can run pods without a container engine. Every
// CreateContainer request is written as JSON into --record-dir, so tests can check exactly what
// the kubelet handed to a container: devices, CDI devices, environment, mounts and annotations.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

// recordingRuntime is the upstream fake runtime with CreateContainer wrapped by a recorder.
type recordingRuntime struct {
	*fake.RemoteRuntime
	recordDir string
	seq       atomic.Uint64
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

func (r *recordingRuntime) record(req *kubeapi.CreateContainerRequest) error {
	data, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(req)
	if err != nil {
		return err
	}
	meta := req.GetSandboxConfig().GetMetadata()
	name := fmt.Sprintf("%s_%s_%s_%d_%06d.json",
		meta.GetNamespace(), meta.GetName(), req.GetConfig().GetMetadata().GetName(),
		req.GetConfig().GetMetadata().GetAttempt(), r.seq.Add(1))
	name = unsafeChars.ReplaceAllString(name, "-")
	tmp := filepath.Join(r.recordDir, "."+name+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(r.recordDir, name))
}

// CreateContainer records the request, then lets the upstream fake create the container.
func (r *recordingRuntime) CreateContainer(ctx context.Context, req *kubeapi.CreateContainerRequest) (*kubeapi.CreateContainerResponse, error) {
	if r.recordDir != "" {
		if err := r.record(req); err != nil {
			log.Printf("recording CreateContainer: %v", err)
		}
	}
	log.Printf("CreateContainer sandbox=%s container=%s devices=%d cdi=%d",
		req.GetPodSandboxId(), req.GetConfig().GetMetadata().GetName(),
		len(req.GetConfig().GetDevices()), len(req.GetConfig().GetCDIDevices()))
	return r.RemoteRuntime.CreateContainer(ctx, req)
}

func main() {
	listen := flag.String("listen", "", "unix socket path to serve the CRI on")
	recordDir := flag.String("record-dir", "", "directory for CreateContainer request records")
	flag.Parse()
	if *listen == "" {
		log.Fatal("--listen is required")
	}
	if *recordDir != "" {
		if err := os.MkdirAll(*recordDir, 0o755); err != nil {
			log.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(*listen), 0o755); err != nil {
		log.Fatal(err)
	}
	_ = os.Remove(*listen)

	base := fake.NewFakeRemoteRuntime()
	base.RuntimeService.FakeStatus = &kubeapi.RuntimeStatus{
		Conditions: []*kubeapi.RuntimeCondition{
			{Type: kubeapi.RuntimeReady, Status: true},
			{Type: kubeapi.NetworkReady, Status: true},
		},
	}
	base.RuntimeService.FakeLinuxConfiguration = &kubeapi.LinuxRuntimeConfiguration{
		CgroupDriver: kubeapi.CgroupDriver_CGROUPFS,
	}
	// The kubelet refuses images whose size is unknown; "pulled" images get a nominal size.
	base.ImageService.SetFakeImageSize(4 << 20)
	rt := &recordingRuntime{RemoteRuntime: base, recordDir: *recordDir}

	server := grpc.NewServer()
	kubeapi.RegisterRuntimeServiceServer(server, rt)
	kubeapi.RegisterImageServiceServer(server, rt)

	lis, err := listenUnix(*listen)
	if err != nil {
		log.Fatal(err)
	}

	// The upstream fake keeps a log of every call; trim it so a long run does not grow forever.
	go func() {
		for range time.Tick(30 * time.Second) {
			base.RuntimeService.Lock()
			base.RuntimeService.Called = nil
			base.RuntimeService.Unlock()
		}
	}()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		server.Stop()
	}()
	log.Printf("fake CRI serving on %s, recording into %q", *listen, *recordDir)
	if err := server.Serve(lis); err != nil {
		log.Printf("serve: %v", err)
	}
	_ = os.Remove(*listen)
}
