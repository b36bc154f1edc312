-- Returns a plain table, not st.job{...}.
return { name = "not a job" }
