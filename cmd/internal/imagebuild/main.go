// Command imagebuild writes the agent image and the default workload image
// as image archives (internal/ociimage), without a registry or a container
// engine, and with -mgmt the server image too: `make agent-image` runs it
// into build/images.
//
//	imagebuild -agent bin/agentic-agent [-mgmt bin/agentic-mgmt] [-busybox /bin/busybox] [-out build/images] [-version v]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/agentic-sandbox/agentic-sandbox/internal/ociimage"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	fs.SetOutput(stderr)
	agent := fs.String("agent", "bin/agentic-agent", "the static (CGO_ENABLED=0) agentic-agent to put in the agent image")
	mgmt := fs.String("mgmt", "", "the static (CGO_ENABLED=0) agentic-mgmt: also write the server image (default: none)")
	busybox := fs.String("busybox", "", "the static busybox of the workload image (default: Debian's busybox-static)")
	out := fs.String("out", "build/images", "directory the archives are written to")
	version := fs.String("version", ociimage.Version, "the images' tag")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "imagebuild: unexpected arguments %q\n", fs.Args())
		return 2
	}
	built, err := ociimage.Build(*out, *agent, *busybox, *version)
	if err != nil {
		fmt.Fprintln(stderr, "imagebuild:", err)
		return 1
	}
	if *mgmt != "" {
		b, err := ociimage.BuildServer(*out, *mgmt, *version)
		if err != nil {
			fmt.Fprintln(stderr, "imagebuild:", err)
			return 1
		}
		built = append(built, b)
	}
	for _, b := range built {
		fmt.Fprintf(stdout, "%s\t%s\t%s\n", b.Path, b.Ref, b.Digest)
	}
	return 0
}
