-- sandbox: a table error object with a message field shows the message
error({ message = "the data folder is missing", code = 2 })
