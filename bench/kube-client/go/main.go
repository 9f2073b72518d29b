// Command create-configmaps is the client-go side of bench/kube-client: it creates N ConfigMaps
// in a namespace as fast as client-go allows with client-side rate limiting disabled, and prints
// the wall time as JSON, in the same shape as `telo-kube bench-create`.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig path")
	namespace := flag.String("n", "", "namespace to create the ConfigMaps in")
	count := flag.Int("count", 2000, "number of ConfigMaps")
	prefix := flag.String("prefix", "bench-", "name prefix")
	flag.Parse()
	if *namespace == "" {
		fmt.Fprintln(os.Stderr, "create-configmaps: -n NAMESPACE is required")
		os.Exit(2)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "create-configmaps:", err)
		os.Exit(1)
	}
	// A negative QPS leaves the client without a rate limiter (rest.RESTClientFor only builds a
	// token bucket for QPS > 0); the API server's priority and fairness is the only limit, as
	// for our client.
	cfg.QPS = -1
	cfg.Burst = 0
	// Count what bounds client-go here: 429 answers (API Priority and Fairness rejecting
	// excess concurrency; client-go waits Retry-After and retries) and new connections.
	var throttled, conns atomic.Int64
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
				if !info.Reused {
					conns.Add(1)
				}
			}}
			resp, err := rt.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
			if err == nil && resp.StatusCode == http.StatusTooManyRequests {
				throttled.Add(1)
			}
			return resp, err
		})
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "create-configmaps:", err)
		os.Exit(1)
	}
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < *count; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: *prefix + strconv.Itoa(i)},
				Data:       map[string]string{"index": strconv.Itoa(i)},
			}
			_, err := cs.CoreV1().ConfigMaps(*namespace).Create(context.Background(), cm,
				metav1.CreateOptions{})
			if err != nil {
				if failed.Add(1) <= 3 {
					fmt.Fprintln(os.Stderr, "create-configmaps:", err)
				}
				return
			}
			ok.Add(1)
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	out, _ := json.Marshal(map[string]any{"count": *count, "ok": ok.Load(), "failed": failed.Load(),
		"seconds": elapsed, "throttled_429": throttled.Load(),
		"new_connections": conns.Load()})
	fmt.Println(string(out))
	if failed.Load() > 0 {
		os.Exit(1)
	}
}
