package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
)

// The region of every AWS client (Kinesis, DynamoDB, CloudWatch through the consumer; Glue, S3
// and a SigV4-signed REST catalog through the catalog properties) is one value, resolved once:
//
//  1. `region:` in the configuration file, when set;
//  2. else the AWS SDK's own chain: AWS_REGION, AWS_DEFAULT_REGION, the region of the profile
//     (AWS_PROFILE, ~/.aws/config);
//  3. else, for the commands that talk to AWS, the EC2 instance metadata (IMDS), unless
//     AWS_EC2_METADATA_DISABLED=true.
//
// The region is then written into the catalog properties glue.region (Glue catalog), s3.region
// (any S3 warehouse or REST catalog) and rest.signing-region (REST with rest.sigv4-enabled) the
// file does not set, so that no client falls back to a chain of its own.

// imdsRegionTimeout bounds the instance-metadata lookup off EC2.
const imdsRegionTimeout = 2 * time.Second

// errNoRegion explains where a region can come from.
var errNoRegion = errors.New("region: not set: set region in the configuration file, AWS_REGION or AWS_DEFAULT_REGION, " +
	"or a region in the AWS profile, or run on EC2 with instance metadata")

// sdkRegion is the region of the SDK's chain without instance metadata ("" when none is set).
func sdkRegion(ctx context.Context) (string, error) {
	c, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return "", fmt.Errorf("region: load the AWS configuration: %w", err)
	}
	return c.Region, nil
}

// imdsRegion asks the EC2 instance metadata for the region ("" off EC2, when disabled, or on any
// error: the caller then reports errNoRegion).
var imdsRegion = func(ctx context.Context) string {
	if strings.EqualFold(os.Getenv("AWS_EC2_METADATA_DISABLED"), "true") {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, imdsRegionTimeout)
	defer cancel()
	out, err := imds.New(imds.Options{}).GetRegion(ctx, nil)
	if err != nil {
		return ""
	}
	return out.Region
}

// resolveRegion fills c.Region from the SDK's chain when the file did not set it (step 2) and
// hands it to the catalog properties. It reads only the environment and the shared files.
func (c *Config) resolveRegion(ctx context.Context) error {
	if c.Region == "" {
		r, err := sdkRegion(ctx)
		if err != nil {
			return err
		}
		c.Region = r
	}
	c.shareRegion()
	return nil
}

// requireRegion is resolveRegion's step 3 for the commands that call AWS: instance metadata when
// no region is known yet; errNoRegion when there is none.
func (c *Config) requireRegion(ctx context.Context) error {
	if c.Region == "" {
		c.Region = imdsRegion(ctx)
	}
	if c.Region == "" {
		return errNoRegion
	}
	c.shareRegion()
	return nil
}

// shareRegion sets the region on the consumer and on the catalog properties the file left out.
func (c *Config) shareRegion() {
	c.Consumer.Region = c.Region
	if c.Region == "" {
		return
	}
	cat := &c.Sink.Catalog
	setProp := func(k string) {
		if _, ok := cat.Properties[k]; ok {
			return
		}
		if cat.Properties == nil {
			cat.Properties = map[string]string{}
		}
		cat.Properties[k] = c.Region
	}
	if cat.Type == "glue" {
		setProp("glue.region")
	}
	_, clientRegion := cat.Properties["client.region"]
	if !clientRegion && (cat.Type != "sql" || strings.HasPrefix(cat.Warehouse, "s3://") || strings.HasPrefix(cat.Warehouse, "s3a://")) {
		setProp("s3.region")
	}
	if cat.Type == "rest" && cat.Properties["rest.sigv4-enabled"] == "true" {
		setProp("rest.signing-region")
	}
}

// awsConfig loads the SDK configuration for the clients cmd builds (Kinesis, DynamoDB), with
// the resolved region.
func (c *Config) awsConfig(ctx context.Context, opts ...func(*awsconfig.LoadOptions) error) (aws.Config, error) {
	if err := c.requireRegion(ctx); err != nil {
		return aws.Config{}, err
	}
	opts = append([]func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(c.Region)}, opts...)
	ac, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	return ac, nil
}

// requireCatalogRegion is requireRegion for the commands that only open the catalog (maintain,
// verify): an embedded SQL catalog with a local warehouse needs no region.
func (c *Config) requireCatalogRegion(ctx context.Context) error {
	cat := c.Sink.Catalog
	if cat.Type == "sql" && !strings.HasPrefix(cat.Warehouse, "s3://") && !strings.HasPrefix(cat.Warehouse, "s3a://") {
		return nil
	}
	return c.requireRegion(ctx)
}
