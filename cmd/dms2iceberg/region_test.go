package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// isolateAWSEnv clears the region variables and points the shared files at nothing.
func isolateAWSEnv(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_REGION": "", "AWS_DEFAULT_REGION": "", "AWS_PROFILE": "", "AWS_DEFAULT_PROFILE": "",
		"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
	} {
		t.Setenv(k, v)
	}
}

const glueRegionConfig = `stream: s
sink:
  catalog:
    type: glue
    warehouse: s3://bucket/prefix
`

// With AWS_DEFAULT_REGION and no region key, every client gets that region: the consumer
// (Kinesis, DynamoDB), the SDK configuration cmd builds, and the catalog's Glue and S3 clients.
func TestRegionFromDefaultRegionEnvReachesEveryClient(t *testing.T) {
	isolateAWSEnv(t)
	t.Setenv("AWS_DEFAULT_REGION", "eu-west-1")
	cfg, err := loadConfig(writeConfig(t, glueRegionConfig))
	if err != nil {
		t.Fatal(err)
	}
	ac, err := cfg.awsConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	props := cfg.Sink.Catalog.Properties
	for name, got := range map[string]string{
		"region": cfg.Region, "consumer": cfg.Consumer.Region, "aws config": ac.Region,
		"glue.region": props["glue.region"], "s3.region": props["s3.region"],
	} {
		if got != "eu-west-1" {
			t.Errorf("%s: %q, want eu-west-1", name, got)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

// region in the file wins over the environment; a property the file sets is kept; a SigV4 REST
// catalog gets its signing region.
func TestRegionKeyOverridesChainAndKeepsExplicitProperties(t *testing.T) {
	isolateAWSEnv(t)
	t.Setenv("AWS_REGION", "eu-west-1")
	cfg, err := loadConfig(writeConfig(t, `stream: s
region: ap-south-1
sink:
  catalog:
    type: rest
    uri: https://rest.example
    warehouse: ""
    properties:
      rest.sigv4-enabled: "true"
      s3.region: us-west-2
`))
	if err != nil {
		t.Fatal(err)
	}
	props := cfg.Sink.Catalog.Properties
	if cfg.Region != "ap-south-1" || cfg.Consumer.Region != "ap-south-1" || props["rest.signing-region"] != "ap-south-1" {
		t.Fatalf("region %q consumer %q signing %q, want ap-south-1", cfg.Region, cfg.Consumer.Region, props["rest.signing-region"])
	}
	if props["s3.region"] != "us-west-2" {
		t.Fatalf("s3.region %q: the file's value must be kept", props["s3.region"])
	}
	if _, ok := props["glue.region"]; ok {
		t.Fatal("glue.region set for a REST catalog")
	}
}

// No region anywhere: commands that call AWS fail naming where a region comes from, after
// asking the instance metadata; a local catalog needs none.
func TestRegionMissingIsAnErrorOnlyWhereAWSIsCalled(t *testing.T) {
	isolateAWSEnv(t)
	asked := false
	old := imdsRegion
	imdsRegion = func(context.Context) string { asked = true; return "" }
	t.Cleanup(func() { imdsRegion = old })
	cfg, err := loadConfig(writeConfig(t, "stream: s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Sink.Catalog.Properties["s3.region"]; ok || cfg.Region != "" {
		t.Fatalf("region %q, properties %v: nothing may be invented", cfg.Region, cfg.Sink.Catalog.Properties)
	}
	if err := cfg.requireCatalogRegion(context.Background()); err != nil || asked {
		t.Fatalf("local catalog: %v (metadata asked: %v)", err, asked)
	}
	if _, err := cfg.awsConfig(context.Background()); !errors.Is(err, errNoRegion) || !asked {
		t.Fatalf("awsConfig: %v (metadata asked: %v), want errNoRegion after asking", err, asked)
	}
	imdsRegion = func(context.Context) string { return "sa-east-1" }
	cfg, _ = loadConfig(writeConfig(t, glueRegionConfig))
	if err := cfg.requireCatalogRegion(context.Background()); err != nil || cfg.Sink.Catalog.Properties["glue.region"] != "sa-east-1" {
		t.Fatalf("metadata region: %v, glue.region %q", err, cfg.Sink.Catalog.Properties["glue.region"])
	}
}
