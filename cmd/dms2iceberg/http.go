package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// health tracks what /readyz reports: ready once the catalog is open and the KCL worker's event
// loop has started; not ready after a fatal error, during shutdown, or after the worker stopped.
// /healthz (liveness) fails while stall reports that records wait without progress.
type health struct {
	stall        interface{ Stalled() error } // nil: /healthz always succeeds
	mu           sync.Mutex
	catalogOpen  bool
	kclRunning   bool
	shuttingDown bool
	fatal        error
	onChange     func(ready bool)
}

// update applies f and reports the new readiness to onChange, under the lock so that concurrent
// updates reach onChange in order (it must be quick and must not call back into h).
func (h *health) update(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f()
	if h.onChange != nil {
		h.onChange(h.readyLocked() == nil)
	}
}

func (h *health) CatalogOpened()   { h.update(func() { h.catalogOpen = true }) }
func (h *health) KCLStarted()      { h.update(func() { h.kclRunning = true }) }
func (h *health) KCLStopped()      { h.update(func() { h.kclRunning = false }) }
func (h *health) ShuttingDown()    { h.update(func() { h.shuttingDown = true }) }
func (h *health) Failed(err error) { h.update(func() { h.fatal = errors.Join(h.fatal, err) }) }
func (h *health) Ready() error     { h.mu.Lock(); defer h.mu.Unlock(); return h.readyLocked() }
func (h *health) readyLocked() (err error) {
	switch {
	case h.fatal != nil:
		return fmt.Errorf("fatal error: %v", h.fatal)
	case h.shuttingDown:
		return errors.New("shutting down")
	case !h.catalogOpen:
		return errors.New("catalog not open yet")
	case !h.kclRunning:
		return errors.New("KCL worker not running")
	}
	return nil
}

// opsServer serves /metrics, /healthz and /readyz.
type opsServer struct {
	ln  net.Listener
	srv *http.Server
	log *zap.Logger
	// shutdownBy, when set, is the latest time Run may take to close connections (serve: the
	// shutdown deadline plus consumer.ShutdownSlack).
	shutdownBy func() time.Time
}

// listenOps binds addr. The server starts serving in Run.
func listenOps(addr string, g prometheus.Gatherer, h *health, log *zap.Logger) (*opsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &opsServer{ln: ln, srv: &http.Server{Handler: opsHandler(g, h), ReadHeaderTimeout: 10 * time.Second},
		log: log.Named("http")}, nil
}

// Addr is the bound address (useful with port 0).
func (s *opsServer) Addr() string { return s.ln.Addr().String() }

func opsHandler(g prometheus.Gatherer, h *health) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if h.stall != nil {
			if err := h.stall.Stalled(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = fmt.Fprintf(w, "unhealthy: %v\n", err)
				return
			}
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := h.Ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		_, _ = fmt.Fprintln(w, "ready")
	})
	return mux
}

// Run serves until ctx ends, then shuts the server down within 5 seconds (or by shutdownBy,
// if earlier). A server that fails is logged, not fatal: ingestion goes on without /metrics.
func (s *opsServer) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	s.log.Info("serving /metrics, /healthz, /readyz", zap.String("addr", s.Addr()))
	select {
	case err := <-errc:
		s.log.Error("http server stopped; running without /metrics", zap.Error(err))
		return nil
	case <-ctx.Done():
	}
	by := time.Now().Add(5 * time.Second)
	if s.shutdownBy != nil && s.shutdownBy().Before(by) {
		by = s.shutdownBy()
	}
	shutCtx, cancel := context.WithDeadline(context.Background(), by)
	defer cancel()
	if err := s.srv.Shutdown(shutCtx); err != nil {
		_ = s.srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Warn("http server shutdown", zap.Error(err))
	}
	return nil
}
