"""Spark's S3DynamoDBLogStore protocol: one DynamoDB item per commit decides who owns ``N.json``."""
