// Serves the handler on the fixed upstream port 3000 with express, as an
// of-watchdog node function does. Written for faas-gpu's tests.
'use strict'

const express = require('express')
const handler = require('./function/handler')

const app = express()
app.use(express.text({ type: () => true }))
app.all('*', async (req, res) => {
  try {
    const out = await handler(req)
    res.status(out.status).set(out.headers).send(out.body)
  } catch (err) {
    res.status(500).send(String(err))
  }
})
app.listen(3000, () => console.error('nodefn serving on port 3000'))
