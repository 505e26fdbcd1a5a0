// go-etcd-mutex: etcd's own Go Mutex (go.etcd.io/etcd/clientv3/concurrency,
// etcd 3.4 as Debian packages it), timed for the bench's M1g beside our
// mutex and the raw loop (integration/src/bin/bench/go_peer.rs). Built by
// scripts/go-etcd-peer in GOPATH mode, offline.
//
//	go-etcd-mutex ENDPOINTS SECONDS NAME uncontended
//	go-etcd-mutex ENDPOINTS SECONDS NAME contended N
//
// ENDPOINTS is comma-separated. uncontended: one client, one session
// (TTL 10 s, as the bench's clients), NewMutex(session, NAME), Lock then
// Unlock in a loop; prints "cycles elapsed_seconds p50_us p99_us".
// contended: N goroutines, each its own client and session, handing NAME
// on; prints "acquisitions elapsed_seconds handoff_p50_us handoff_p99_us
// overlaps" (a handoff: from just before a holder's Unlock to the next
// Lock's return, as the bench's Handoffs times ours). Setup (connecting,
// granting the sessions' leases) is outside the timed span.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "go-etcd-mutex: %s: %v\n", what, err)
	os.Exit(1)
}

func connect(endpoints []string) (*clientv3.Client, *concurrency.Session) {
	client, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		fail("connect", err)
	}
	session, err := concurrency.NewSession(client, concurrency.WithTTL(10))
	if err != nil {
		fail("session", err)
	}
	return client, session
}

// percentileUs is the p-th percentile (0..100) of samples in microseconds,
// picked as the bench's percentile_us picks it.
func percentileUs(samples []time.Duration, p float64) float64 {
	if len(samples) == 0 {
		return 0
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	i := int(float64(len(samples)-1)*p/100 + 0.5)
	return float64(samples[i].Nanoseconds()) / 1e3
}

func uncontended(endpoints []string, seconds time.Duration, name string) {
	client, session := connect(endpoints)
	defer client.Close()
	defer session.Close()
	mutex := concurrency.NewMutex(session, name)
	ctx := context.Background()
	var samples []time.Duration
	started := time.Now()
	for time.Since(started) < seconds {
		t := time.Now()
		if err := mutex.Lock(ctx); err != nil {
			fail("lock", err)
		}
		if err := mutex.Unlock(ctx); err != nil {
			fail("unlock", err)
		}
		samples = append(samples, time.Since(t))
	}
	elapsed := time.Since(started)
	fmt.Printf("%d %.6f %.1f %.1f\n", len(samples), elapsed.Seconds(),
		percentileUs(samples, 50), percentileUs(samples, 99))
}

func contended(endpoints []string, seconds time.Duration, name string, n int) {
	type contender struct {
		client  *clientv3.Client
		session *concurrency.Session
	}
	contenders := make([]contender, n)
	for i := range contenders {
		contenders[i].client, contenders[i].session = connect(endpoints)
	}
	var (
		inside   int32
		overlaps int64
		mu       sync.Mutex
		released time.Time
		handoffs []time.Duration
		acquired int64
		wg       sync.WaitGroup
	)
	ctx := context.Background()
	started := time.Now()
	stopAt := started.Add(seconds)
	for _, c := range contenders {
		wg.Add(1)
		go func(session *concurrency.Session) {
			defer wg.Done()
			mutex := concurrency.NewMutex(session, name)
			for time.Now().Before(stopAt) {
				if err := mutex.Lock(ctx); err != nil {
					fail("lock", err)
				}
				at := time.Now()
				if !atomic.CompareAndSwapInt32(&inside, 0, 1) {
					atomic.AddInt64(&overlaps, 1)
				}
				atomic.AddInt64(&acquired, 1)
				mu.Lock()
				if !released.IsZero() {
					handoffs = append(handoffs, at.Sub(released))
				}
				mu.Unlock()
				atomic.StoreInt32(&inside, 0)
				mu.Lock()
				released = time.Now()
				mu.Unlock()
				if err := mutex.Unlock(ctx); err != nil {
					fail("unlock", err)
				}
			}
		}(c.session)
	}
	wg.Wait()
	elapsed := time.Since(started)
	for _, c := range contenders {
		c.session.Close()
		c.client.Close()
	}
	fmt.Printf("%d %.6f %.1f %.1f %d\n", acquired, elapsed.Seconds(),
		percentileUs(handoffs, 50), percentileUs(handoffs, 99), overlaps)
}

func main() {
	args := os.Args[1:]
	usage := "usage: go-etcd-mutex ENDPOINTS SECONDS NAME uncontended | contended N"
	if len(args) < 4 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(64)
	}
	endpoints := strings.Split(args[0], ",")
	secs, err := strconv.ParseFloat(args[1], 64)
	if err != nil {
		fail("seconds", err)
	}
	seconds := time.Duration(secs * float64(time.Second))
	name := args[2]
	switch {
	case args[3] == "uncontended":
		uncontended(endpoints, seconds, name)
	case args[3] == "contended" && len(args) == 5:
		n, err := strconv.Atoi(args[4])
		if err != nil || n < 1 {
			fail("contenders", fmt.Errorf("%q", args[4]))
		}
		contended(endpoints, seconds, name, n)
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(64)
	}
}
