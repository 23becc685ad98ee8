//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Environment variables the harness reads.
const (
	// EnvRace=1 builds the binary under test with -race.
	EnvRace = "DMS2ICEBERG_RACE"
	// EnvEcho=1 also copies every service's output to the test's stderr as it is written.
	EnvEcho = "DMS2ICEBERG_IT_ECHO"
)

// emulatorEnv lists the endpoint variables the tests need, as `.ci/emulators.sh env` prints them.
var emulatorEnv = []string{"AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_S3"}

const startHint = `the integration tests need the local emulators. From the repository root:
    .ci/emulators.sh up && eval "$(.ci/emulators.sh env)"
then run the tests again, or run everything with: make test`

// RequireEmulators fails the test (it never skips) unless the three endpoint variables are set,
// credentials are in the environment, and every endpoint answers HTTP.
func RequireEmulators(t testing.TB) {
	t.Helper()
	// Generous: kinesis-mock holding a lot of data on a busy 2-core machine takes seconds to answer.
	client := &http.Client{Timeout: 15 * time.Second}
	for _, name := range emulatorEnv {
		url := os.Getenv(name)
		if url == "" {
			t.Fatalf("%s is not set: %s", name, startHint)
		}
		resp, err := client.Get(url)
		if err != nil {
			t.Fatalf("%s=%s does not answer (%v): %s", name, url, err, startHint)
		}
		_ = resp.Body.Close()
	}
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" || os.Getenv("AWS_SECRET_ACCESS_KEY") == "" {
		t.Fatalf("AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are not set: %s", startHint)
	}
}

// RepoRoot returns the module root (the directory holding go.mod), found from the working
// directory upwards.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("getwd: %v", err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.Contains(b, []byte("module github.com/dms2iceberg/dms2iceberg")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod of github.com/dms2iceberg/dms2iceberg above the working directory")
		}
		dir = parent
	}
}

var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// BuildBinary builds ./cmd/dms2iceberg with -tags faults once per test process (with -race when
// DMS2ICEBERG_RACE=1) into a temporary directory and returns the binary's path. RunTests removes
// the directory when the tests end.
func BuildBinary(t testing.TB) string {
	t.Helper()
	root := RepoRoot(t)
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "dms2iceberg-it-")
		if build.err != nil {
			return
		}
		build.bin = filepath.Join(build.dir, "dms2iceberg")
		// The faults tag compiles the fault points in (pkg/fault): the chaos harness arms them
		// through DMS2ICEBERG_FAULTS; production builds have none.
		args := []string{"build", "-tags", "faults", "-o", build.bin}
		if os.Getenv(EnvRace) == "1" {
			args = append(args, "-race")
		}
		args = append(args, "./cmd/dms2iceberg")
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		fmt.Fprintf(os.Stderr, "integration: built %s (race=%v) in %s\n", build.bin,
			os.Getenv(EnvRace) == "1", time.Since(start).Round(time.Millisecond))
	})
	if build.err != nil {
		t.Fatalf("build dms2iceberg: %v", build.err)
	}
	return build.bin
}

// RunTests runs the package's tests and then removes what the harness built. Use it from
// TestMain: func TestMain(m *testing.M) { os.Exit(integration.RunTests(m)) }
func RunTests(m *testing.M) int {
	code := m.Run()
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
	return code
}

// Service is one dms2iceberg process started by StartService.
type Service struct {
	t       testing.TB
	cmd     *exec.Cmd
	logFile *os.File
	// LogPath is the file holding the process's stdout and stderr (inside t.TempDir()).
	LogPath string
	done    chan struct{}
	waitErr error
}

var serviceSeq atomic.Int64

// StartService runs `bin run --config configPath` in its own process group with the test
// process's environment plus extraEnv ("K=V"). Its stdout and stderr go to a log file in
// t.TempDir() (also to the test's stderr when DMS2ICEBERG_IT_ECHO=1), which is written to t.Log
// if the test fails. t.Cleanup kills the process group.
func StartService(t testing.TB, bin, configPath string, extraEnv ...string) *Service {
	t.Helper()
	return StartCommand(t, bin, []string{"run", "--config", configPath}, extraEnv)
}

// StartCommand is StartService for any subcommand: it runs bin with args and the test process's
// environment plus env ("K=V").
func StartCommand(t testing.TB, bin string, args, env []string) *Service {
	t.Helper()
	return startCommand(t, bin, args, env, "", 256<<10)
}

// startCommand is StartCommand with the directory of the log file ("": a new t.TempDir()) and
// the number of bytes of the log's tail that go to t.Log when the test fails (a test that starts
// hundreds of processes keeps that small, and its own log directory).
func startCommand(t testing.TB, bin string, args, env []string, logDir string, tailOnFailure int64) *Service {
	t.Helper()
	dir := logDir
	if dir == "" {
		dir = t.TempDir() // before our Cleanup, so the log still exists when it runs
	}
	n := serviceSeq.Add(1)
	logPath := filepath.Join(dir, fmt.Sprintf("service-%d.log", n))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("create service log: %v", err)
	}
	var out io.Writer = f
	if os.Getenv(EnvEcho) == "1" {
		out = io.MultiWriter(f, &prefixWriter{w: os.Stderr, prefix: fmt.Sprintf("[svc%d] ", n)})
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		t.Fatalf("start %s %s: %v", bin, strings.Join(args, " "), err)
	}
	s := &Service{t: t, cmd: cmd, logFile: f, LogPath: logPath, done: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	t.Logf("started service %d: pid %d: %s %s (log %s)", n, cmd.Process.Pid, filepath.Base(bin), strings.Join(args, " "), logPath)
	t.Cleanup(func() {
		s.killGroup()
		<-s.done
		_ = s.logFile.Close()
		if t.Failed() {
			t.Logf("service %d (pid %d) output:\n%s", n, cmd.Process.Pid, tailFile(logPath, tailOnFailure))
		}
	})
	return s
}

// Pid returns the process id (also its process group id).
func (s *Service) Pid() int { return s.cmd.Process.Pid }

// Done is closed when the process has exited.
func (s *Service) Done() <-chan struct{} { return s.done }

// Exited reports whether the process has exited.
func (s *Service) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Log returns everything the process has written so far.
func (s *Service) Log() string {
	b, _ := os.ReadFile(s.LogPath)
	return string(b)
}

func (s *Service) killGroup() {
	if s.Exited() {
		// The leader is gone, but its children (if any) may live on in the group.
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		return
	}
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		_ = s.cmd.Process.Kill()
	}
}

// Kill sends SIGKILL to the whole process group and waits for the process to exit: a crash.
func (s *Service) Kill() {
	s.t.Helper()
	s.killGroup()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.t.Fatalf("service pid %d did not exit 30s after SIGKILL", s.Pid())
	}
}

// Stop sends SIGTERM and waits up to timeout for a graceful exit. It fails the test (after
// killing the process) if the process is still running then. It returns the exit error: nil for
// exit status 0, an *exec.ExitError otherwise.
func (s *Service) Stop(timeout time.Duration) error {
	s.t.Helper()
	if !s.Exited() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-s.done:
		return s.waitErr
	case <-time.After(timeout):
		s.killGroup()
		<-s.done
		s.t.Fatalf("service pid %d did not exit within %s of SIGTERM (killed it)", s.Pid(), timeout)
		return nil
	}
}

// Wait waits for the process to exit by itself and returns its exit error (nil for status 0).
// It waits without limit; use WaitTimeout when the test should fail instead.
func (s *Service) Wait() error {
	<-s.done
	return s.waitErr
}

// WaitTimeout is Wait with a limit; it fails the test if the process is still running then.
func (s *Service) WaitTimeout(timeout time.Duration) error {
	s.t.Helper()
	select {
	case <-s.done:
		return s.waitErr
	case <-time.After(timeout):
		s.t.Fatalf("service pid %d still running after %s", s.Pid(), timeout)
		return nil
	}
}

// ExitCode returns the exit status of an exited process (-1 when killed by a signal) and
// whether it has exited.
func (s *Service) ExitCode() (int, bool) {
	if !s.Exited() {
		return 0, false
	}
	return s.cmd.ProcessState.ExitCode(), true
}

// RunCLI runs bin with args (environment: the test process's) and returns its output. err is
// the *exec.ExitError for a non-zero exit. The command is killed if the test's context ends.
func RunCLI(t testing.TB, bin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return RunCLIEnv(t, nil, bin, args...)
}

// RunCLIEnv is RunCLI with extra environment variables ("K=V").
func RunCLIEnv(t testing.TB, env []string, bin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	return o.String(), e.String(), err
}

// UniqueName returns prefix plus a time- and random-based suffix, usable as a Kinesis stream,
// DynamoDB table, KCL application or S3 bucket name: lowercase [a-z0-9-], at most 63 characters.
// The prefix (t.Name() is fine) is lowercased and every other character becomes '-'.
func UniqueName(prefix string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(prefix) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	p := strings.Trim(b.String(), "-")
	if p == "" {
		p = "it"
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	suffix := "-" + strconv.FormatInt(time.Now().Unix()%(36*36*36*36*36), 36) + "-" + hex.EncodeToString(rnd[:])
	if max := 63 - len(suffix); len(p) > max {
		p = strings.TrimRight(p[:max], "-")
	}
	return p + suffix
}

// AWSConfig loads the SDK configuration from the environment (AWS_ENDPOINT_URL_<SERVICE> included).
func AWSConfig(t testing.TB) aws.Config {
	t.Helper()
	cfg, err := config.LoadDefaultConfig(t.Context())
	if err != nil {
		t.Fatalf("load AWS config: %v", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return cfg
}

// Kinesis returns a Kinesis client for the emulator.
func Kinesis(t testing.TB) *kinesis.Client { return kinesis.NewFromConfig(AWSConfig(t)) }

// DynamoDB returns a DynamoDB client for the emulator. It skips the CRC32 check of responses,
// which DynamoDB Local's error responses fail harmlessly (the SDK would log a warning for each).
func DynamoDB(t testing.TB) *dynamodb.Client {
	return dynamodb.NewFromConfig(AWSConfig(t), func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true })
}

// S3 returns an S3 client for the emulator, with path-style addressing (the SDK has no
// environment variable for it, and the emulators need it).
func S3(t testing.TB) *s3.Client {
	return s3.NewFromConfig(AWSConfig(t), func(o *s3.Options) { o.UsePathStyle = true })
}

// createBucket creates a fresh bucket on the S3 emulator.
func createBucket(t testing.TB) string {
	t.Helper()
	name := UniqueName("it-wh")
	if _, err := S3(t).CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	return name
}

// CreateStream creates a Kinesis stream with the given number of shards, waits until it is
// ACTIVE, and deletes it when the test ends.
func CreateStream(t testing.TB, name string, shards int32) {
	t.Helper()
	kc := Kinesis(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := kc.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)}); err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := deleteStream(kc, name); err != nil {
			t.Logf("cleanup: delete stream %s: %v", name, err)
		}
	})
	w := kinesis.NewStreamExistsWaiter(kc, func(o *kinesis.StreamExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, 500*time.Millisecond
	})
	if err := w.Wait(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(name)}, time.Minute); err != nil {
		t.Fatalf("stream %s not ACTIVE: %v", name, err)
	}
}

// DeleteStream deletes a stream and waits until it is gone. A stream that does not exist is not
// an error.
func DeleteStream(t testing.TB, name string) {
	t.Helper()
	if err := deleteStream(Kinesis(t), name); err != nil {
		t.Fatalf("delete stream %s: %v", name, err)
	}
}

func deleteStream(kc *kinesis.Client, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := kc.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String(name), EnforceConsumerDeletion: aws.Bool(true)})
	var nf *kintypes.ResourceNotFoundException
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		return err
	}
	w := kinesis.NewStreamNotExistsWaiter(kc, func(o *kinesis.StreamNotExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, 500*time.Millisecond
	})
	return w.Wait(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(name)}, time.Minute)
}

// DeleteTable deletes a DynamoDB table (a KCL lease table, say) if it exists, and waits until it
// is gone.
func DeleteTable(t testing.TB, name string) {
	t.Helper()
	dc := DynamoDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := dc.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	var nf *ddbtypes.ResourceNotFoundException
	if errors.As(err, &nf) {
		return
	}
	if err != nil {
		t.Fatalf("delete table %s: %v", name, err)
	}
	if err := dynamodb.NewTableNotExistsWaiter(dc).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, time.Minute); err != nil {
		t.Fatalf("table %s not deleted: %v", name, err)
	}
}

// WaitFor polls cond every poll until it returns true, and fails the test with what (and the
// last error cond returned, if any) when timeout passes first. Errors do not stop the polling:
// "not there yet" often looks like an error.
func WaitFor(t testing.TB, timeout, poll time.Duration, cond func() (bool, error), what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			lastErr = err
		}
		if time.Now().After(deadline) {
			if lastErr != nil {
				t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, lastErr)
			}
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("test ended while waiting for %s", what)
		case <-time.After(poll):
		}
	}
}

func tailFile(path string, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot stat %s: %v)", path, err)
	}
	prefix := ""
	if st.Size() > max {
		if _, err := f.Seek(st.Size()-max, io.SeekStart); err != nil {
			return fmt.Sprintf("(cannot seek %s: %v)", path, err)
		}
		prefix = fmt.Sprintf("[... first %d bytes cut ...]\n", st.Size()-max)
	}
	b, _ := io.ReadAll(f)
	return prefix + string(b)
}

// prefixWriter prefixes each line it passes on (best effort: writes are assumed to end lines).
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	mid    bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out bytes.Buffer
	for _, c := range b {
		if !p.mid {
			out.WriteString(p.prefix)
			p.mid = true
		}
		out.WriteByte(c)
		if c == '\n' {
			p.mid = false
		}
	}
	if _, err := p.w.Write(out.Bytes()); err != nil {
		return 0, err
	}
	return len(b), nil
}
