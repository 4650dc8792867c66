// sluice-xds-test-server: an xDS management server for sluice's tests, built on go-control-plane
// (the library Envoy Gateway's own server uses). It serves
// ratelimit.config.ratelimit.v3.RateLimitConfig resources over ADS, state of the world, from a
// snapshot per node that the test sets over HTTP, and records what each node ACKs and NACKs.
//
//	-grpc ADDR  the ADS port (default 127.0.0.1:0: the OS picks)
//	-http ADDR  the control port (default 127.0.0.1:0)
//	-cert, -key, -ca  serve ADS over TLS, requiring client certificates signed by -ca if given
//
// When ready it prints one line on stdout: `xds grpc=HOST:PORT http=HOST:PORT`.
//
//	PUT /snapshot?node=ID&version=V  body: a JSON array of RateLimitConfig in protojson
//	GET /status?node=ID              {"acked": "V", "nacked": "V", "error": "reason", "requests": N}
//	                                 (nacked: the version set when the node last NACKed)
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"
)

// status is what one node said about the resources it was sent.
type status struct {
	Acked    string `json:"acked"`
	Nacked   string `json:"nacked"`
	Error    string `json:"error"`
	Requests int    `json:"requests"`
}

type recorder struct {
	mu    sync.Mutex
	nodes map[string]*status
	// The version last set for each node: what a NACK refused (a NACK itself names the
	// version the node kept, as the protocol asks).
	set map[string]string
}

func (r *recorder) of(node string) *status {
	s, ok := r.nodes[node]
	if !ok {
		s = &status{}
		r.nodes[node] = s
	}
	return s
}

// request records one DiscoveryRequest: an ACK names the version it applied, a NACK carries
// error_detail (and names the version it kept: the one refused is the one last set).
func (r *recorder) request(req *discovery.DiscoveryRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.of(req.GetNode().GetId())
	s.Requests++
	if req.GetResponseNonce() == "" {
		return
	}
	if e := req.GetErrorDetail(); e != nil {
		s.Error = e.GetMessage()
		s.Nacked = r.set[req.GetNode().GetId()]
		return
	}
	s.Acked = req.GetVersionInfo()
}

func main() {
	grpcAddr := flag.String("grpc", "127.0.0.1:0", "ADS address")
	httpAddr := flag.String("http", "127.0.0.1:0", "control address")
	certFile := flag.String("cert", "", "server certificate (PEM): serve ADS over TLS")
	keyFile := flag.String("key", "", "server key (PEM)")
	caFile := flag.String("ca", "", "client CA (PEM): require client certificates")
	flag.Parse()

	rec := &recorder{nodes: map[string]*status{}, set: map[string]string{}}
	snapshots := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	callbacks := serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discovery.DiscoveryRequest) error {
			rec.request(req)
			return nil
		},
	}
	ads := serverv3.NewServer(context.Background(), snapshots, callbacks)

	var opts []grpc.ServerOption
	if *certFile != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			log.Fatalf("certificate: %v", err)
		}
		config := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if *caFile != "" {
			pem, err := os.ReadFile(*caFile)
			if err != nil {
				log.Fatalf("client CA: %v", err)
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(pem)
			config.ClientCAs = pool
			config.ClientAuth = tls.RequireAndVerifyClientCert
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(config)))
	}
	server := grpc.NewServer(opts...)
	discovery.RegisterAggregatedDiscoveryServiceServer(server, ads)
	grpcListener, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		log.Fatalf("ADS listener: %v", err)
	}
	go func() { log.Fatal(server.Serve(grpcListener)) }()

	mux := http.NewServeMux()
	mux.HandleFunc("PUT /snapshot", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var raw []json.RawMessage
		if err := json.Unmarshal(body, &raw); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resources := make([]types.Resource, 0, len(raw))
		for _, one := range raw {
			config := &rlsconf.RateLimitConfig{}
			if err := protojson.Unmarshal(one, config); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			resources = append(resources, config)
		}
		snapshot, err := cachev3.NewSnapshot(r.URL.Query().Get("version"),
			map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: resources})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rec.mu.Lock()
		rec.set[r.URL.Query().Get("node")] = r.URL.Query().Get("version")
		rec.mu.Unlock()
		if err := snapshots.SetSnapshot(context.Background(), r.URL.Query().Get("node"), snapshot); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rec.of(r.URL.Query().Get("node")))
	})
	httpListener, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		log.Fatalf("control listener: %v", err)
	}
	fmt.Printf("xds grpc=%s http=%s\n", grpcListener.Addr(), httpListener.Addr())
	log.Fatal(http.Serve(httpListener, mux))
}
