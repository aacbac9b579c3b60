// kstatus reads Kubernetes objects as JSON (one object, or an array of them) on stdin and prints, for each, the status
// that sigs.k8s.io/cli-utils/pkg/kstatus/status computes: what Flux's and kpt's health checks read. The tests run it
// on the objects as the API server returns them (scripts/install-kstatus.sh builds it).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type reading struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	var objects []json.RawMessage
	if err := json.Unmarshal(input, &objects); err != nil {
		objects = []json.RawMessage{input}
	}
	readings := make([]reading, 0, len(objects))
	for _, text := range objects {
		// Unstructured's own decoding, which keeps integers int64 as the API machinery expects them.
		object := &unstructured.Unstructured{}
		if err := object.UnmarshalJSON(text); err != nil {
			fail(err)
		}
		result, err := status.Compute(object)
		if err != nil {
			fail(err)
		}
		readings = append(readings, reading{Status: result.Status.String(), Message: result.Message})
	}
	if err := json.NewEncoder(os.Stdout).Encode(readings); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kstatus:", err)
	os.Exit(1)
}
