// telo-netpol: the real node's NetworkPolicy enforcer (hack/cluster/real-node.sh), built on the
// controller library of sigs.k8s.io/kube-network-policies (pinned in go.mod).
//
// Upstream's own command only runs in a pod (in-cluster credentials) and always uses the nftables
// table "kube-network-policies". Two local clusters with a real node each run on one machine,
// so this command takes what a host process needs instead: a kubeconfig, the node's name, and a
// table name and nfqueue number of its own, so that each node's rules and verdicts stay apart.
// Everything else (which packets are queued, how a verdict is reached) is the library's.
//
//	telo-netpol --kubeconfig F --node-name N --table-name T --nfqueue-id Q   enforce until SIGTERM
//	telo-netpol --table-name T --cleanup                                     delete table T, exit
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/google/nftables"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

func main() {
	os.Exit(run())
}

func run() int {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the enforcer's identity (required)")
	nodeName := flag.String("node-name", "", "the Node whose pods are enforced (required)")
	tableName := flag.String("table-name", "", "nftables table (inet family) holding this node's rules (required)")
	queueID := flag.Int("nfqueue-id", 100, "nfqueue number the first packets of connections are sent to")
	failOpen := flag.Bool("fail-open", false, "accept packets while no enforcer listens on the queue")
	cleanup := flag.Bool("cleanup", false, "delete the table (what a killed enforcer left) and exit")
	klog.InitFlags(nil)
	flag.Parse()
	quietTableFailures(os.Stderr)

	if *tableName == "" {
		fmt.Fprintln(os.Stderr, "telo-netpol: --table-name is required")
		return 2
	}
	if *cleanup {
		return deleteTable(*tableName)
	}
	if *kubeconfig == "" || *nodeName == "" {
		fmt.Fprintln(os.Stderr, "telo-netpol: --kubeconfig and --node-name are required")
		return 2
	}
	if *queueID < 1 || *queueID > 65535 {
		fmt.Fprintf(os.Stderr, "telo-netpol: --nfqueue-id %d is outside 1..65535\n", *queueID)
		return 2
	}

	// SIGTERM (down.sh) as well as SIGINT: the controller removes its table only when its
	// context ends; killed outright it would leave rules that queue to nobody.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	restConfig, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.ErrorS(err, "reading the kubeconfig", "path", *kubeconfig)
		return 1
	}
	restConfig.UserAgent = "telo-netpol/" + *nodeName
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		klog.ErrorS(err, "creating the client")
		return 1
	}

	factory := informers.NewSharedInformerFactory(client, 0)
	// No AdminNetworkPolicy: the node, ANP and BANP informers and the policy-API client stay nil.
	// NRI stays on (the library looks pod IPs up through it when the apiserver has not published
	// them yet); containerd 1.6 has no NRI socket, which the library logs and then ignores.
	controller, err := networkpolicy.NewController(client,
		factory.Networking().V1().NetworkPolicies(),
		factory.Core().V1().Namespaces(),
		factory.Core().V1().Pods(),
		nil, nil, nil, nil,
		networkpolicy.Config{
			FailOpen:            *failOpen,
			QueueID:             *queueID,
			NodeName:            *nodeName,
			NetfilterBug1766Fix: true,
			NFTableName:         *tableName,
		})
	if err != nil {
		klog.ErrorS(err, "creating the NetworkPolicy controller")
		return 1
	}
	factory.Start(ctx.Done())
	klog.InfoS("enforcing NetworkPolicies", "node", *nodeName, "table", "inet "+*tableName,
		"nfqueue", *queueID, "failOpen", *failOpen)
	// Run returns when the context ends (after removing the table) or when it cannot open the
	// queue: another process bound the same number.
	if err := controller.Run(ctx); err != nil {
		klog.ErrorS(err, "the NetworkPolicy controller stopped", "nfqueue", *queueID)
		return 1
	}
	return 0
}

// tableFailureFilter passes klog's entries (one Write each) to out, except the library's
// reports that its nftables table does not load, which it repeats on every pod or policy change
// here: this kernel has no nft `queue` expression, and real-node.sh installs iptables rules
// instead. The first full report (a few entries) passes; later ones are only counted.
type tableFailureFilter struct {
	mu   sync.Mutex
	out  io.Writer
	seen int
}

func (f *tableFailureFilter) Write(p []byte) (int, error) {
	if !bytes.Contains(p, []byte("nftables rules")) &&
		!bytes.Contains(p, []byte("netlink receive: no such file or directory")) {
		return f.out.Write(p)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen++
	switch {
	case f.seen <= 3:
		_, _ = f.out.Write(p)
		if f.seen == 3 {
			fmt.Fprintln(f.out, "telo-netpol: the library's nftables table does not load here; "+
				"further reports of it are counted, not logged (hack/cluster/README.md, NetworkPolicy)")
		}
	case f.seen%1000 == 0:
		fmt.Fprintf(f.out, "telo-netpol: %d reports of the nftables table not loading so far\n", f.seen)
	}
	return len(p), nil
}

func quietTableFailures(out io.Writer) {
	// Everything through the filter, nothing straight to stderr.
	_ = flag.Set("logtostderr", "false")
	_ = flag.Set("alsologtostderr", "false")
	_ = flag.Set("stderrthreshold", "FATAL")
	klog.SetOutput(&tableFailureFilter{out: out})
}

func deleteTable(name string) int {
	conn, err := nftables.New()
	if err != nil {
		fmt.Fprintf(os.Stderr, "telo-netpol: netlink: %v\n", err)
		return 1
	}
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		fmt.Fprintf(os.Stderr, "telo-netpol: listing nftables tables: %v\n", err)
		return 1
	}
	for _, t := range tables {
		if t.Name == name {
			conn.DelTable(t)
			if err := conn.Flush(); err != nil {
				fmt.Fprintf(os.Stderr, "telo-netpol: deleting table inet %s: %v\n", name, err)
				return 1
			}
			fmt.Fprintf(os.Stderr, "telo-netpol: deleted table inet %s\n", name)
		}
	}
	return 0
}
