"""object_store's DynamoCommit: conditional writes on S3 through leases in a DynamoDB table
(``leases``: a store wrapper), and the log store that commits through them (``log_store``)."""
